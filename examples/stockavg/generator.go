package main

import (
	"context"
	"encoding/json"
	"math"
	"math/rand/v2"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// The generator's tickers and their opening prices.
var tickers = []struct {
	name  string
	price float64
}{
	{"AAPL", 190}, {"MSFT", 410}, {"GOOG", 140}, {"AMZN", 180}, {"NVDA", 480}, {"META", 330}, {"TSLA", 240},
	{"NFLX", 480}, {"AMD", 120}, {"INTC", 45}, {"ORCL", 115}, {"IBM", 160}, {"SAP", 150}, {"ADBE", 560},
	{"CRM", 260}, {"UBER", 60}, {"SHOP", 70}, {"SQ", 65}, {"PYPL", 60}, {"COIN", 130},
}

// generate writes trades to the topic at about rate per second until ctx
// is done: each ticker's price walks at random; a trade's time is when it
// happened, and it reaches Kafka a little later — usually within a second
// or two, so trades arrive out of order, and one in a hundred minutes late,
// after its moving-average windows have closed.
func generate(ctx context.Context, cl *kgo.Client, topic string, rate int, seed uint64) error {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	prices := make([]float64, len(tickers))
	for i, t := range tickers {
		prices[i] = t.price
	}
	tick := time.NewTicker(time.Second / time.Duration(max(rate, 1)))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		i := rng.IntN(len(tickers))
		prices[i] = math.Max(1, prices[i]*(1+rng.NormFloat64()*0.002))
		at := time.Now().Add(-time.Duration(rng.ExpFloat64() * float64(700*time.Millisecond)))
		if rng.IntN(100) == 0 {
			at = at.Add(-time.Duration(1+rng.IntN(3)) * time.Minute) // a late trade
		}
		t := Trade{Ticker: tickers[i].name, Price: math.Round(prices[i]*100) / 100, Size: int64(1 + rng.IntN(20)*50), Time: at.UTC()}
		v, _ := json.Marshal(t)
		cl.Produce(ctx, &kgo.Record{Topic: topic, Key: []byte(t.Ticker), Value: v, Timestamp: time.Now()}, func(_ *kgo.Record, err error) {
			_ = err // the next trades keep coming; a failed one is a lost trade
		})
	}
}
