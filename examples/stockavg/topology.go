package main

import (
	"cmp"
	"errors"
	"math"
	"slices"
	"time"

	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/engine/serde"
	"github.com/oxbow-dev/oxbow/projection"
)

// Trade is one trade of a stock.
type Trade struct {
	Ticker string    `json:"ticker"`
	Price  float64   `json:"price"`
	Size   int64     `json:"size"`
	Time   time.Time `json:"time"` // when it happened: the event time
}

// Average is a ticker's trades in a window: their mean price and their
// volume-weighted mean (VWAP).
type Average struct {
	Trades   int64   `json:"trades"`
	Volume   int64   `json:"volume"`
	Mean     float64 `json:"mean"`
	VWAP     float64 `json:"vwap"`
	SumPrice float64 `json:"sumPrice"`
	Notional float64 `json:"notional"`
}

// Day is a ticker's day: its first, highest, lowest and last prices (first
// and last by the time of the trades, whatever order they arrive in).
type Day struct {
	Open     float64   `json:"open"`
	OpenAt   time.Time `json:"openAt"`
	High     float64   `json:"high"`
	Low      float64   `json:"low"`
	Last     float64   `json:"last"`
	LastAt   time.Time `json:"lastAt"`
	Trades   int64     `json:"trades"`
	Volume   int64     `json:"volume"`
	ChangePc float64   `json:"changePct"` // last against open, in percent
}

// Mover is a ticker's change over its day.
type Mover struct {
	Ticker   string  `json:"ticker"`
	Last     float64 `json:"last"`
	ChangePc float64 `json:"changePct"`
}

// ranking is one day's changes of every ticker, for the top movers.
type ranking struct {
	Changes map[string]Mover `json:"changes"`
}

// The windows: a 5-minute average advancing every minute, with 30 seconds
// for late trades; a day, with 10 minutes.
const (
	averageSize    = 5 * time.Minute
	averageAdvance = time.Minute
	averageGrace   = 30 * time.Second
	daySize        = 24 * time.Hour
	dayGrace       = 10 * time.Minute
	topN           = 10
	// The count windows: 10 trades of a ticker, a window every 5 trades,
	// whenever they happened.
	tradesWindow  = 10
	tradesAdvance = 5
)

// tables are the tables the example serves and prints: each knows its
// store, its serdes and its windows, for the views and the queries.
type tables struct {
	averages   *engine.Table[engine.Windowed[string], Average]
	lastTrades *engine.Table[engine.CountWindowed[string], Average]
	days       *engine.Table[engine.Windowed[string], Day]
	movers     *engine.Table[string, []Mover]
}

// topology is the stock example: trades (keyed by ticker, timed by their
// own time) into a moving average per ticker (over 5 minutes, and over 10
// trades), each ticker's day, and the day's top movers ranked in a second
// stage on one partition.
func topology(tradesTopic string) (*engine.Topology, tables, *projection.Registry, error) {
	var tb tables
	b := engine.NewBuilder()
	trades := engine.NewStream(b, tradesTopic, serde.String, serde.JSON[Trade](), engine.Named("trades"),
		engine.WithTimestamps(func(_ string, t Trade, _ time.Time) (time.Time, error) { return t.Time, nil }))
	byTicker := trades.GroupByKey(engine.Named("by-ticker"))

	tb.averages = engine.WindowedAggregate(byTicker.WindowedBy(engine.HoppingWindows(averageSize, averageAdvance).Grace(averageGrace)),
		func() Average { return Average{} }, addTrade,
		engine.Named("moving-average"), engine.Materialized("moving-average"), engine.ValueSerde(serde.JSON[Average]()))

	// The same average over a number of trades instead of a time: count
	// windows, in the order the trades arrive (a late trade counts too).
	tb.lastTrades = engine.CountWindowedAggregate(byTicker.WindowedByCount(engine.HoppingCountWindows(tradesWindow, tradesAdvance)),
		func() Average { return Average{} }, addTrade,
		engine.Named("last-trades"), engine.Materialized("last-trades"), engine.ValueSerde(serde.JSON[Average]()))

	tb.days = engine.WindowedAggregate(byTicker.WindowedBy(engine.TumblingWindows(daySize).Grace(dayGrace)),
		func() Day { return Day{} },
		func(_ string, t Trade, d Day) Day {
			if d.Trades == 0 || t.Time.Before(d.OpenAt) {
				d.Open, d.OpenAt = t.Price, t.Time
			}
			if d.Trades == 0 || !t.Time.Before(d.LastAt) {
				d.Last, d.LastAt = t.Price, t.Time
			}
			if d.Trades == 0 || t.Price > d.High {
				d.High = t.Price
			}
			if d.Trades == 0 || t.Price < d.Low {
				d.Low = t.Price
			}
			d.Trades++
			d.Volume += t.Size
			d.ChangePc = round(100 * (d.Last - d.Open) / d.Open)
			return d
		}, engine.Named("daily"), engine.Materialized("daily"), engine.ValueSerde(serde.JSON[Day]()))

	// The top movers, in two stages: each ticker's change comes out of its
	// day, keyed by the day; one partition then ranks the day's tickers.
	changes := engine.Map(tb.days.ToStream(engine.Named("daily-changes")), func(w engine.Windowed[string], d Day) (string, Mover) {
		return w.Window.Start.UTC().Format(time.DateOnly), Mover{Ticker: w.Key, Last: d.Last, ChangePc: d.ChangePc}
	}, engine.Named("by-day"))
	ranked := engine.Aggregate(changes.WithSerdes(serde.String, serde.JSON[Mover]()).Repartition(engine.Partitions(1), engine.Named("movers")).GroupByKey(engine.Named("movers-by-day")),
		func() ranking { return ranking{Changes: map[string]Mover{}} },
		func(_ string, m Mover, r ranking) ranking {
			if r.Changes == nil {
				r.Changes = map[string]Mover{}
			}
			r.Changes[m.Ticker] = m
			return r
		}, engine.Named("rankings"), engine.Materialized("rankings"), engine.ValueSerde(serde.JSON[ranking]()))
	tb.movers = engine.MapTableValues(ranked, func(_ string, r ranking) []Mover { return top(r, topN) },
		engine.Named("top-movers"), engine.Materialized("top-movers"), engine.ValueSerde(serde.JSON[[]Mover]()))

	top, err := b.Build()
	if err != nil {
		return nil, tb, nil, err
	}
	// The views take their stores' names, serdes and windows from the
	// tables.
	avgView, aerr := projection.OfWindowed(tb.averages)
	dayView, derr := projection.OfWindowed(tb.days)
	tradesView, terr := projection.OfCountWindowed(tb.lastTrades)
	moversView, merr := projection.Of(tb.movers)
	if err := errors.Join(aerr, derr, terr, merr); err != nil {
		return nil, tb, nil, err
	}
	views, err := projection.NewRegistry(avgView, dayView, tradesView, moversView)
	return top, tb, views, err
}

// addTrade adds a trade to an average.
func addTrade(_ string, t Trade, a Average) Average {
	a.Trades++
	a.Volume += t.Size
	a.SumPrice += t.Price
	a.Notional += t.Price * float64(t.Size)
	a.Mean = round(a.SumPrice / float64(a.Trades))
	if a.Volume > 0 {
		a.VWAP = round(a.Notional / float64(a.Volume))
	}
	return a
}

// top is the n tickers that moved most (by the size of their change), the
// biggest first, ties by ticker.
func top(r ranking, n int) []Mover {
	out := make([]Mover, 0, len(r.Changes))
	for _, m := range r.Changes {
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b Mover) int {
		if c := cmp.Compare(math.Abs(b.ChangePc), math.Abs(a.ChangePc)); c != 0 {
			return c
		}
		return cmp.Compare(a.Ticker, b.Ticker)
	})
	return out[:min(n, len(out))]
}

// round keeps four decimals.
func round(f float64) float64 { return math.Round(f*1e4) / 1e4 }
