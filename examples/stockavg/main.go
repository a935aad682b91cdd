// Command stockavg follows stock trades: a 5-minute moving average per
// ticker advancing every minute, each ticker's day (open, high, low, last)
// and the day's top 10 movers, served over HTTP and shown in the terminal.
//
//	go run ./examples/stockavg                      # generated trades, embedded Kafka
//	go run ./examples/stockavg -brokers localhost:9092 -trades my-trades -generate=false
//
// Trades are keyed by ticker, JSON {"ticker","price","size","time"}, and
// go by their own time: the generator sends them a little out of order, and
// a few too late for their windows.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/engine/kafkaenv"
	"github.com/oxbow-dev/oxbow/engine/kafkasec"
	"github.com/oxbow-dev/oxbow/httpapi"
	"github.com/oxbow-dev/oxbow/telemetry"
)

type config struct {
	Name     string // the application's id; default "stockavg"
	Addr     string
	Brokers  []string // none: an embedded broker
	Kafka    kafkasec.Config
	Trades   string // the trades topic; default "<Name>-trades"
	Generate bool   // write generated trades to it
	Rate     int    // generated trades per second
	StateDir string
	Logger   *slog.Logger
	// Token, if set, is the bearer token every request but /healthz and
	// /readyz needs; none: the API is open.
	Token string
	// Table, if set, gets the terminal table every Every.
	Table io.Writer
	Every time.Duration
	Ready func(url string)
}

func main() {
	fs := flag.NewFlagSet("stockavg", flag.ExitOnError)
	addr := fs.String("addr", "127.0.0.1:8081", "the HTTP API's listen address")
	brokers := fs.String("brokers", os.Getenv("KAFKA_BROKERS"), "Kafka's brokers, comma-separated (default $KAFKA_BROKERS; none: an embedded broker)")
	trades := fs.String("trades", "", "the trades topic (default stockavg-trades)")
	gen := fs.Bool("generate", true, "generate trades into the topic")
	rate := fs.Int("rate", 200, "generated trades per second")
	quiet := fs.Bool("quiet", false, "no table in the terminal")
	stateDir := fs.String("state-dir", "", "where the state is kept (default: a temporary directory)")
	token := fs.String("token", os.Getenv("STOCKAVG_TOKEN"), "the bearer token the API requires of every request but /healthz and /readyz (default $STOCKAVG_TOKEN; none: the API is open)")
	security := kafkasec.Flags(fs)
	logFormat := telemetry.LogFormatFlag(fs)
	_ = fs.Parse(os.Args[1:])
	sec, err := security()
	if err != nil {
		fmt.Fprintln(os.Stderr, "stockavg:", err)
		os.Exit(2)
	}
	log, err := telemetry.NewLogger(os.Stderr, *logFormat, slog.LevelWarn)
	if err != nil {
		fmt.Fprintln(os.Stderr, "stockavg:", err)
		os.Exit(2)
	}
	slog.SetDefault(log)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg := config{Addr: *addr, Kafka: sec, Token: *token, Trades: *trades, Generate: *gen, Rate: *rate, StateDir: *stateDir, Every: 2 * time.Second,
		Logger: log,
		Ready: func(url string) {
			auth := ""
			if *token != "" {
				auth = `-H "Authorization: Bearer $STOCKAVG_TOKEN" `
				fmt.Println("The API takes requests only with the token (Authorization: Bearer <token>); /healthz and /readyz are open.")
			} else {
				fmt.Println("The API is open to whoever reaches it: give -token (or $STOCKAVG_TOKEN) to require a bearer token.")
			}
			fmt.Printf("stockavg serves %s\n  its console, in a browser: %s/console/\n  curl %s%s/views/top-movers/entries\n  curl %s%s/views/moving-average/keys/NVDA/windows\n", url, url, auth, url, auth, url)
		}}
	if !*quiet {
		cfg.Table = os.Stdout
	}
	for _, b := range strings.Split(*brokers, ",") {
		if b = strings.TrimSpace(b); b != "" {
			cfg.Brokers = append(cfg.Brokers, b)
		}
	}
	if err := run(ctx, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "stockavg:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, cfg config) error {
	if cfg.Name == "" {
		cfg.Name = "stockavg"
	}
	if cfg.Trades == "" {
		cfg.Trades = cfg.Name + "-trades"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if len(cfg.Brokers) == 0 {
		env, err := kafkaenv.StartEmbedded(kafkaenv.Options{})
		if err != nil {
			return err
		}
		defer env.Close()
		cfg.Brokers = env.Brokers
	}
	if cfg.StateDir == "" {
		dir, err := os.MkdirTemp("", "stockavg-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		cfg.StateDir = dir
	}
	opts, err := cfg.Kafka.ClientOpts(cfg.Brokers)
	if err != nil {
		return err
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return err
	}
	defer cl.Close()
	res, err := kadm.NewClient(cl).CreateTopics(ctx, 3, -1, nil, cfg.Trades)
	if err != nil {
		return err
	}
	for _, r := range res.Sorted() {
		if r.Err != nil && !errors.Is(r.Err, kerr.TopicAlreadyExists) {
			return fmt.Errorf("creating %s: %w", r.Topic, r.Err)
		}
	}
	top, tb, views, err := topology(cfg.Trades)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return err
	}
	// The engine's and the API's metrics, served at /metrics.
	meters, metrics, err := httpapi.PrometheusMetrics(httpapi.Service("stockavg", ""))
	if err != nil {
		return err
	}
	defer func() { _ = meters.Shutdown(context.WithoutCancel(ctx)) }()
	app, err := engine.NewApp(top, engine.Config{AppID: cfg.Name, Brokers: cfg.Brokers, KafkaSecurity: cfg.Kafka, StateDir: filepath.Join(cfg.StateDir, "engine"),
		InstanceID: cfg.Name + "-0", AdvertisedAddr: ln.Addr().String(), Logger: cfg.Logger, CommitInterval: time.Second, MeterProvider: meters})
	if err != nil {
		return err
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	appDone := make(chan error, 1)
	go func() { appDone <- app.Run(runCtx) }()
	hcfg := httpapi.Config{Instance: app, Views: views, Topology: top, Brokers: cfg.Brokers, KafkaSecurity: cfg.Kafka,
		Logger: cfg.Logger, Metrics: metrics, MeterProvider: meters, Console: true}
	if cfg.Token != "" {
		hcfg.Authenticator = httpapi.Tokens(map[string]httpapi.Identity{cfg.Token: {Subject: "stockavg", Permissions: httpapi.AllPermissions()}})
	}
	h, err := httpapi.New(hcfg)
	if err != nil {
		return err
	}
	srv := httpapi.NewServer(cfg.Addr, h)
	go func() { _ = srv.Serve(ln) }()
	genDone := make(chan error, 1)
	if cfg.Generate {
		go func() { genDone <- generate(runCtx, cl, cfg.Trades, cfg.Rate, uint64(time.Now().UnixNano())) }()
	} else {
		genDone <- nil
	}

	var runErr error
	select {
	case <-app.Ready():
		if cfg.Ready != nil {
			cfg.Ready("http://" + ln.Addr().String())
		}
	case runErr = <-appDone:
	case <-ctx.Done():
	}
	if runErr == nil && ctx.Err() == nil {
		var tick <-chan time.Time
		if cfg.Table != nil && cfg.Every > 0 {
			t := time.NewTicker(cfg.Every)
			defer t.Stop()
			tick = t.C
		}
	loop:
		for {
			select {
			case <-ctx.Done():
				break loop
			case runErr = <-appDone:
				break loop
			case <-tick:
				printTable(cfg.Table, app, tb)
			}
		}
	}
	h.Close()
	sctx, scancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer scancel()
	_ = srv.Shutdown(sctx)
	cancel()
	<-genDone
	if err := app.Close(); err != nil && runErr == nil {
		runErr = err
	}
	return runErr
}

// printTable prints the tickers' days and latest averages, and the top
// movers, read from the instance's stores.
func printTable(w io.Writer, app *engine.App, tb tables) {
	days, err := engine.QueryWindowedTable(app, tb.days)
	if err != nil {
		return
	}
	avgs, err := engine.QueryWindowedTable(app, tb.averages)
	if err != nil {
		return
	}
	lastTrades, err := engine.QueryCountWindowedTable(app, tb.lastTrades)
	if err != nil {
		return
	}
	now := time.Now()
	type row struct {
		ticker string
		day    Day
		avg    Average
		trades Average // the latest full count window
	}
	var rows []row
	for kv, err := range days.All() {
		if err != nil || !kv.Key.Window.End.After(now) {
			continue
		}
		r := row{ticker: kv.Key.Key, day: kv.Value}
		// The latest window that has ended by now... or the one in progress.
		for a, err := range avgs.Fetch(kv.Key.Key, now.Add(-averageSize), now) {
			if err == nil {
				r.avg = a.Value
			}
		}
		for a, err := range lastTrades.Fetch(kv.Key.Key) {
			if err == nil && a.Value.Trades == tradesWindow {
				r.trades = a.Value
			}
		}
		rows = append(rows, r)
	}
	slices.SortFunc(rows, func(a, b row) int { return strings.Compare(a.ticker, b.ticker) })
	if f, ok := w.(*os.File); ok && isTerminal(f) {
		fmt.Fprint(w, "\033[H\033[2J")
	}
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "%s\tLAST\tCHG%%\tHIGH\tLOW\t5M AVG\t5M VWAP\t%dT VWAP\tTRADES\t\n", now.Format("15:04:05"), tradesWindow)
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%.2f\t%+.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%d\t\n", r.ticker, r.day.Last, r.day.ChangePc, r.day.High, r.day.Low, r.avg.Mean, r.avg.VWAP, r.trades.VWAP, r.day.Trades)
	}
	_ = tw.Flush()
	movers, err := engine.QueryTable(app, tb.movers)
	if err != nil {
		return
	}
	if ms, ok, err := movers.Get(now.UTC().Format(time.DateOnly)); err == nil && ok {
		var parts []string
		for _, m := range ms {
			parts = append(parts, fmt.Sprintf("%s %+.2f%%", m.Ticker, m.ChangePc))
		}
		fmt.Fprintf(w, "top movers: %s\n\n", strings.Join(parts, ", "))
	}
}

func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
