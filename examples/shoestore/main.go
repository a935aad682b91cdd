// Command shoestore is Oxbow's main example: an event-sourced shoe store.
//
// Shipments arrive, pairs are sold and returned, through commands to the
// inventory aggregate (one per shoe; a sale of a shoe not in stock is
// rejected). Views over the events are served over HTTP: the inventory per
// shoe, the till (the money taken, at the catalog's prices, and the number
// of transactions), the log of returns with their reasons, and the pairs
// sold per shoe per day. The catalog (model → name, price) lives in a
// PostgreSQL table captured by CDC and joined to the sales; without a
// database the store seeds a catalog topic itself, and says so.
//
//	go run ./examples/shoestore                       # embedded Kafka, temporary state
//	go run ./examples/shoestore -brokers localhost:9092 -pg postgres://…/shop
//
// Beside the store runs a second service, the warehouse (warehouse.go): it
// knows the store only by the inventory's contract, watches the stock, and
// restocks a shoe that falls below its reorder point with a shipment from
// the supplier, through a process manager (package saga). Both run by
// default, each an application of its own on the same brokers; -services
// runs one alone (as separate processes, say).
//
// The views come in versions (-version; Versions in store.go): a new
// version runs as a consumer group of its own, beside the one serving, and
// computes its views again from the inventory's events — never deciding a
// command again: the decider is an application of its own, one for all
// versions. The oxbow tool (cmd/oxbow) follows its catch-up and promotes
// it; every instance's API then serves it, asking an instance that runs
// it where it does not itself.
//
// README.md walks through the classic scenario with curl, and through a
// second version's catch-up, promotion, rollback and the first's
// retirement.
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/oxbow-dev/oxbow/aggregate"
	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/engine/kafkaenv"
	"github.com/oxbow-dev/oxbow/engine/kafkasec"
	"github.com/oxbow-dev/oxbow/engine/serde"
	"github.com/oxbow-dev/oxbow/engine/serde/registry"
	"github.com/oxbow-dev/oxbow/httpapi"
	"github.com/oxbow-dev/oxbow/internal/fixtures/inventory"
	"github.com/oxbow-dev/oxbow/telemetry"
	"github.com/oxbow-dev/oxbow/versions"
)

// config is what the store runs with.
type config struct {
	// Name names the application, its topics ("<Name>-inventory-commands",
	// "<Name>.public.catalog", ...) and its replication slot; default
	// "shoestore".
	Name    string
	Addr    string   // HTTP listen address
	Brokers []string // none: an embedded broker
	// Kafka is how to reach secured brokers (TLS, SASL).
	Kafka kafkasec.Config
	PGDSN string // none: a seeded catalog
	// PGPasswordFile holds the database user's password, if not in PGDSN
	// or $PGPASSWORD.
	PGPasswordFile string
	StateDir       string // none: a temporary directory
	// OutcomeRetention is how long a command's outcome is kept to answer
	// a repeat of its Idempotency-Key (0: a day, aggregate's default).
	OutcomeRetention time.Duration
	// MemoryBudget is each of the store's two applications' (the
	// engine's Config.MemoryBudget; 0: none).
	MemoryBudget int64
	// CacheBytes is each application's record cache (the engine's
	// Config.CacheBytes; 0: the engine's default, or the budget's share).
	CacheBytes int64
	// Token, if set, is the bearer token every request but /healthz and
	// /readyz needs (it may do everything); none: the API is open.
	Token string
	// InstanceID names this instance of the store among others in its
	// group (default "<Name>-<Version>-0": a second version started with
	// the first one's command line is another instance); each needs its
	// own.
	InstanceID string
	// LeaveHangingTransactions: report the transactions Kafka left open
	// on the store's partitions, and do not end them (the engine's
	// Config.LeaveHangingTransactions; by default they are ended as
	// their coordinators decided).
	LeaveHangingTransactions bool
	Logger                   *slog.Logger
	// EngineLogger is the engine's and the capture's (default: Logger).
	EngineLogger *slog.Logger
	// Ready, if set, is called with the API's URL once the store serves.
	Ready func(url string)
	// Registry, if set, is a schema registry: the inventory's commands and
	// events travel in Avro with their schemas there (inventory.AvroTypes);
	// none: in JSON envelopes.
	Registry *registry.Registry
	// Version is the version of the store's views this instance runs, one
	// of Versions (default "v1"): its consumer group is "<Name>-<Version>".
	// It registers on the control topic; the first version to run is
	// active, and the API serves the active version's views, asking an
	// instance that runs it if this one does not.
	Version string
	// ControlTopic is the versions' control topic (default
	// versions.DefaultTopic).
	ControlTopic string
}

// inventoryTypes are the inventory's types: in Avro with their schemas in
// reg, or in JSON envelopes without one.
func inventoryTypes(ctx context.Context, reg *registry.Registry, name string) (*aggregate.Types[inventory.Command], *aggregate.Types[inventory.Event], error) {
	if reg == nil {
		return inventory.Commands(), inventory.Events(), nil
	}
	return inventory.AvroTypes(ctx, reg, name)
}

func main() {
	fs := flag.NewFlagSet("shoestore", flag.ExitOnError)
	name := fs.String("name", "shoestore", "names the store's applications, topics and replication slot (the views' consumer groups are <name>-<version>)")
	addr := fs.String("addr", "127.0.0.1:8080", "the HTTP API's listen address")
	brokers := fs.String("brokers", os.Getenv("KAFKA_BROKERS"), "Kafka's brokers, comma-separated (default $KAFKA_BROKERS; none: an embedded broker)")
	pg := fs.String("pg", os.Getenv("OXBOW_PG_DSN"), "the PostgreSQL database of the catalog, TLS in it: sslmode=verify-full&sslrootcert=... (default $OXBOW_PG_DSN; none: a seeded catalog topic)")
	pgPassword := fs.String("pg-password-file", os.Getenv("OXBOW_PG_PASSWORD_FILE"), "file holding the database user's password (default $OXBOW_PG_PASSWORD_FILE)")
	security := kafkasec.Flags(fs)
	token := fs.String("token", os.Getenv("SHOESTORE_TOKEN"), "the bearer token the API requires of every request but /healthz and /readyz (default $SHOESTORE_TOKEN; none: the API is open)")
	printACLs := fs.String("print-acls", "", "print the kafka-acls.sh commands that grant this principal (User:name) what the store needs, and exit")
	stateDir := fs.String("state-dir", "", "where the store keeps its state (default: a temporary directory)")
	instance := fs.String("instance", "", "this instance's id, unique among the store's instances on the same brokers (default <name>-<version>-0)")
	verbose := fs.Bool("v", false, "log what the engine does, too")
	services := fs.String("services", "store,warehouse", "the services this process runs: store, warehouse or both, comma-separated")
	warehouseAddr := fs.String("warehouse-addr", "127.0.0.1:8081", "the warehouse's HTTP API's listen address")
	warehouseInstance := fs.String("warehouse-instance", "warehouse-0", "this warehouse instance's id, unique among the warehouse's instances")
	leadTime := fs.Duration("lead-time", 5*time.Second, "how long the warehouse's supplier takes to deliver a shipment")
	version := fs.String("version", Versions[0], fmt.Sprintf("the version of the store's views this instance runs (%s); a new version computes its views from the whole history beside the one serving, and the oxbow tool promotes it", strings.Join(Versions, ", ")))
	memoryBudget := fs.Int64("memory-budget", 0, "bytes of memory each of the store's applications (the decider and the views) divides between its caches and heap (engine.Config.MemoryBudget; 0: the engine's separate defaults)")
	cacheBytes := fs.Int64("cache-bytes", 0, "bytes of record cache each of the store's applications keeps (engine.Config.CacheBytes; 0: the engine's default, or the memory budget's share)")
	outcomeRetention := fs.Duration("outcome-retention", 24*time.Hour, "how long a command's outcome is kept to answer a repeat of its Idempotency-Key")
	leaveHanging := fs.Bool("leave-hanging-transactions", false, "report the transactions Kafka left open on the store's partitions without ending them (default: end each with the marker its coordinator decided, which needs CLUSTER_ACTION)")
	registryURL := fs.String("registry", "", "a schema registry's Confluent-compatible API (http://127.0.0.1:8085/apis/ccompat/v7 as scripts/services.sh starts it): the inventory's commands and events travel in Avro with their schemas there (none: in JSON envelopes)")
	logFormat := telemetry.LogFormatFlag(fs)
	_ = fs.Parse(os.Args[1:])
	log, err := telemetry.NewLogger(os.Stderr, *logFormat, slog.LevelInfo)
	if err != nil {
		fmt.Fprintln(os.Stderr, "shoestore:", err)
		os.Exit(2)
	}
	slog.SetDefault(log)
	sec, err := security()
	if err != nil {
		log.Error("shoestore: " + err.Error())
		os.Exit(2)
	}
	if *printACLs != "" {
		acls, err := storeACLs(*name)
		if err != nil {
			log.Error("shoestore: " + err.Error())
			os.Exit(1)
		}
		bootstrap := *brokers
		if bootstrap == "" {
			bootstrap = "BROKER:9093"
		}
		for _, a := range acls {
			fmt.Printf("# %s\n%s\n", a.Why, a.Command(bootstrap, *printACLs))
		}
		return
	}
	engineLog, _ := telemetry.NewLogger(os.Stderr, *logFormat, slog.LevelWarn) // the format passed above
	if *verbose {
		engineLog = log
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg := config{Name: *name, Addr: *addr, Token: *token, Kafka: sec, PGDSN: *pg, PGPasswordFile: *pgPassword, StateDir: *stateDir, OutcomeRetention: *outcomeRetention, MemoryBudget: *memoryBudget, CacheBytes: *cacheBytes, InstanceID: *instance, Version: *version, LeaveHangingTransactions: *leaveHanging, Logger: log, EngineLogger: engineLog, Ready: func(url string) {
		auth := ""
		if *token != "" {
			auth = `-H "Authorization: Bearer $SHOESTORE_TOKEN" `
			fmt.Println("The API takes requests only with the token (Authorization: Bearer <token>); /healthz and /readyz are open.")
		} else {
			fmt.Println("The API is open to whoever reaches it: give -token (or $SHOESTORE_TOKEN) to require a bearer token.")
		}
		fmt.Printf("The shoe store (views %s) serves %s\n  its console, in a browser: %s/console/\n  curl %s%s/views\n  curl %s-H 'Content-Type: application/json' %s/aggregates/inventory/red/commands -d '{\"type\":\"ReceiveShipment\",\"data\":{\"quantity\":1,\"unitCost\":3000}}'\n(Ctrl-C stops it; examples/shoestore/README.md walks through the classic scenario.)\n", *version, url, url, auth, url, auth, url)
	}}
	for _, b := range strings.Split(*brokers, ",") {
		if b = strings.TrimSpace(b); b != "" {
			cfg.Brokers = append(cfg.Brokers, b)
		}
	}
	if *registryURL != "" {
		reg, err := registry.New(registry.Config{URLs: []string{*registryURL}})
		if err != nil {
			log.Error("shoestore: -registry: " + err.Error())
			os.Exit(2)
		}
		defer reg.Close()
		cfg.Registry = reg
	}
	runStore, runWh := false, false
	for _, s := range strings.Split(*services, ",") {
		switch strings.TrimSpace(s) {
		case "store":
			runStore = true
		case "warehouse":
			runWh = true
		default:
			log.Error(fmt.Sprintf("shoestore: -services: %q is neither store nor warehouse", s))
			os.Exit(2)
		}
	}
	if len(cfg.Brokers) == 0 {
		// One embedded broker for both services.
		env, err := kafkaenv.StartEmbedded(kafkaenv.Options{})
		if err != nil {
			log.Error("shoestore: " + err.Error())
			os.Exit(1)
		}
		defer env.Close()
		cfg.Brokers = env.Brokers
		log.Info("shoestore: on an embedded Kafka broker (give -brokers for a real one)", "brokers", env.Brokers)
	}
	wcfg := warehouseConfig{Name: *name, Addr: *warehouseAddr, Brokers: cfg.Brokers, Kafka: sec, InstanceID: *warehouseInstance, Token: *token, Registry: cfg.Registry,
		LeadTime: *leadTime, Logger: log, EngineLogger: engineLog, Ready: func(url string) {
			fmt.Printf("The warehouse serves %s; it restocks a shoe below its reorder point:\n  curl -H 'Content-Type: application/json' %s/aggregates/supply/blue/commands -d '{\"type\":\"SetReorderPoint\",\"data\":{\"below\":2,\"order\":10,\"unitCost\":2500}}'\n", url, url)
		}}
	if *stateDir != "" {
		wcfg.StateDir = filepath.Join(*stateDir, "warehouse")
	}
	if err := runServices(ctx, runStore, runWh, cfg, wcfg); err != nil {
		log.Error("shoestore: " + err.Error())
		stop()
		os.Exit(1)
	}
}

// runServices runs the store, the warehouse or both until ctx is done or
// one fails (which stops the other).
func runServices(ctx context.Context, store, warehouse bool, cfg config, wcfg warehouseConfig) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, 2)
	n := 0
	if store {
		n++
		go func() { errs <- run(ctx, cfg) }()
	}
	if warehouse {
		n++
		go func() {
			err := runWarehouse(ctx, wcfg)
			if err != nil {
				err = fmt.Errorf("warehouse: %w", err)
			}
			errs <- err
		}()
	}
	var all []error
	for range n {
		if err := <-errs; err != nil {
			all = append(all, err)
			cancel()
		}
	}
	return errors.Join(all...)
}

// run runs the store until ctx is done.
func run(ctx context.Context, cfg config) error {
	log := cmp.Or(cfg.Logger, slog.Default())
	cfg.Name, cfg.Version = cmp.Or(cfg.Name, "shoestore"), cmp.Or(cfg.Version, Versions[0])
	cfg.InstanceID = cmp.Or(cfg.InstanceID, cfg.Name+"-"+cfg.Version+"-0")
	cfg.EngineLogger = cmp.Or(cfg.EngineLogger, log)
	if len(cfg.Brokers) == 0 {
		env, err := kafkaenv.StartEmbedded(kafkaenv.Options{})
		if err != nil {
			return err
		}
		defer env.Close()
		cfg.Brokers = env.Brokers
		log.Info("shoestore: on an embedded Kafka broker (give -brokers for a real one)", "brokers", env.Brokers)
	}
	if cfg.StateDir == "" {
		dir, err := os.MkdirTemp("", "shoestore-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		cfg.StateDir = dir
	}

	cmdTypes, eventTypes, err := inventoryTypes(ctx, cfg.Registry, cfg.Name+"-inventory")
	if err != nil {
		return err
	}
	inv, err := inventory.NewWith(cfg.Name+"-inventory", cmdTypes, eventTypes, cfg.OutcomeRetention)
	if err != nil {
		return err
	}
	commands, events, replies := inv.Topics()
	if err := createTopics(ctx, cfg, commands, events, replies, catalogTopic(cfg.Name)); err != nil {
		return err
	}
	catCtx, catCancel := context.WithCancel(ctx)
	defer catCancel()
	catalog, err := startCatalog(catCtx, cfg, log)
	if err != nil {
		return err
	}
	top, views, err := topology(cfg.Name, cfg.Version, inv)
	if err != nil {
		return err
	}
	decTop, err := decider(inv)
	if err != nil {
		return err
	}
	control, err := versions.New(cfg.Brokers, versions.Options{Topic: cfg.ControlTopic, KafkaSecurity: cfg.Kafka})
	if err != nil {
		return err
	}
	defer control.Close()

	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return err
	}
	url := "http://" + ln.Addr().String()
	// The engine's and the API's metrics, served at /metrics.
	meters, metrics, err := httpapi.PrometheusMetrics(httpapi.Service(cfg.Name, cfg.Version))
	if err != nil {
		return err
	}
	defer func() { _ = meters.Shutdown(context.WithoutCancel(ctx)) }()
	// Two applications: the decider of the inventory's commands, and the
	// views in this instance's version of them, which a later version
	// computes again from the events, beside it.
	engineConfig := func(appID, version string) engine.Config {
		names := engine.Names{AppID: appID, Version: version}
		return engine.Config{AppID: appID, Version: version, Brokers: cfg.Brokers, KafkaSecurity: cfg.Kafka, StateDir: filepath.Join(cfg.StateDir, names.Group()),
			InstanceID: cfg.InstanceID, Guarantee: engine.ExactlyOnce, AdvertisedAddr: ln.Addr().String(), Logger: cfg.EngineLogger, MeterProvider: meters,
			// A record the store cannot read (an event a faulty producer
			// wrote, say) is put aside, and the console's dead letters show
			// it, rather than stopping the store.
			OnDeserializationError: engine.DeadLetter, DeadLetterTopic: deadLetterTopic(cfg.Name),
			// Stopped, an instance hands its tasks over at once (and a
			// version whose instances have all stopped may be retired).
			LeaveGroupOnClose: true, MemoryBudget: cfg.MemoryBudget, CacheBytes: cfg.CacheBytes, LeaveHangingTransactions: cfg.LeaveHangingTransactions}
	}
	dec, err := engine.NewApp(decTop, engineConfig(deciderApp(cfg.Name), ""))
	if err != nil {
		return err
	}
	app, err := engine.NewApp(top, engineConfig(cfg.Name, cfg.Version))
	if err != nil {
		return errors.Join(err, dec.Close())
	}
	// The version registers, and is active if it is the first, before it
	// starts: its catch-up shows in its lag from the first record on.
	if err := control.RegisterApp(ctx, app, top); err != nil {
		return errors.Join(err, app.Close(), dec.Close())
	}
	if _, err := control.PromoteIfNone(ctx, cfg.Name, cfg.Version); err != nil {
		return errors.Join(err, app.Close(), dec.Close())
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	appDone := make(chan error, 2)
	go func() { appDone <- dec.Run(runCtx) }()
	go func() { appDone <- app.Run(runCtx) }()
	watcher := control.Watcher()
	watched := make(chan error, 1)
	go func() { watched <- watcher.Run(runCtx) }()
	stopped := func(err error) error {
		cancel()
		return errors.Join(err, app.Close(), dec.Close(), <-watched)
	}

	client, err := inv.NewClient(ctx, aggregate.ClientConfig{Brokers: cfg.Brokers, KafkaSecurity: cfg.Kafka, Timeout: 10 * time.Second})
	if err != nil {
		return stopped(err)
	}
	defer client.Close()
	hcfg := httpapi.Config{Versions: map[string]httpapi.Served{cfg.Version: {Instance: app, Views: views, Topology: top}},
		Active: func() string { return watcher.Active(cfg.Name) }, VersionControl: control, Brokers: cfg.Brokers, KafkaSecurity: cfg.Kafka,
		Commands: map[string]httpapi.Submitter{"inventory": inCatalog{client, url, cfg.Token}}, Deciders: map[string]httpapi.Decider{"inventory": dec}, Logger: log, Metrics: metrics, MeterProvider: meters, Console: true}
	if cfg.Token != "" {
		hcfg.Authenticator = httpapi.Tokens(map[string]httpapi.Identity{cfg.Token: {Subject: "shoestore", Permissions: httpapi.AllPermissions()}})
	}
	h, err := httpapi.New(hcfg)
	if err != nil {
		return stopped(err)
	}
	err = serve(ctx, app, appDone, cancel, h, ln, cfg.Addr, func() error {
		// The API serves once it knows which version is active.
		select {
		case <-watcher.Ready():
		case <-ctx.Done():
			return nil
		}
		// Sales are priced by the catalog: serve once it is loaded.
		if err := awaitCatalog(ctx, app); err != nil {
			return err
		}
		if cfg.Ready != nil {
			cfg.Ready(url)
		}
		return nil
	})
	catCancel()
	return errors.Join(err, dec.Close(), <-watched, catalog.wait())
}

// awaitCatalog waits until the catalog table has the seed catalog's
// models (a minute at most).
func awaitCatalog(ctx context.Context, app *engine.App) error {
	deadline := time.Now().Add(time.Minute)
	for {
		missing := ""
		st, err := engine.QueryKeyValueStore(app, "catalog", serde.String, serde.JSON[CatalogItem]())
		if err == nil {
			for _, c := range seedCatalog {
				_, ok, err := st.Get(c.Model)
				var nl *engine.NotLocalError
				if errors.As(err, &nl) && nl.Owner.ID != "" {
					continue // another instance's to wait for
				}
				if err != nil || !ok {
					missing = c.Model
					break
				}
			}
		} else {
			missing = err.Error()
		}
		if missing == "" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("shoestore: the catalog has no %s after a minute: is its capture running?", missing)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// createTopics creates the store's topics if they are missing.
func createTopics(ctx context.Context, cfg config, topics ...string) error {
	opts, err := cfg.Kafka.ClientOpts(cfg.Brokers)
	if err != nil {
		return err
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return err
	}
	defer cl.Close()
	res, err := kadm.NewClient(cl).CreateTopics(ctx, partitions, -1, nil, topics...)
	if err != nil {
		return fmt.Errorf("shoestore: creating the topics: %w", err)
	}
	for _, r := range res.Sorted() {
		if r.Err != nil && !errors.Is(r.Err, kerr.TopicAlreadyExists) {
			return fmt.Errorf("shoestore: creating %s: %w", r.Topic, r.Err)
		}
	}
	// A topic just created may not be in every broker's metadata yet: wait
	// until each has its partitions' leaders (30 seconds at most).
	adm := kadm.NewClient(cl)
	deadline := time.Now().Add(30 * time.Second)
	for {
		md, err := adm.Metadata(ctx, topics...)
		missing := ""
		if err != nil {
			missing = err.Error()
		} else {
			for _, t := range topics {
				d, ok := md.Topics[t]
				if !ok || d.Err != nil || len(d.Partitions) == 0 {
					missing = t
					break
				}
				for _, p := range d.Partitions {
					if p.Err != nil || p.Leader < 0 {
						missing = t
					}
				}
			}
		}
		if missing == "" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("shoestore: topic %s not ready 30 seconds after its creation", missing)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// storeACLs are what the store's principal needs on a cluster with ACLs
// on: the engine's, for the inventory's decider and for every version of
// the views (their groups, the internal topics and transactional ids
// under "<group>-", which the inventory's topics share, their inputs and
// outputs), the versions' control topic, and the catalog capture's topics
// under "<name>.".
func storeACLs(name string) ([]engine.ACL, error) {
	inv, err := inventory.New(name + "-inventory")
	if err != nil {
		return nil, err
	}
	decTop, err := decider(inv)
	if err != nil {
		return nil, err
	}
	acls := engine.ACLs(decTop, engine.Config{AppID: deciderApp(name), Guarantee: engine.ExactlyOnce, DeadLetterTopic: deadLetterTopic(name)})
	for _, v := range Versions {
		top, _, err := topology(name, v, inv)
		if err != nil {
			return nil, err
		}
		for _, a := range engine.ACLs(top, engine.Config{AppID: name, Version: v, Guarantee: engine.ExactlyOnce, DeadLetterTopic: deadLetterTopic(name)}) {
			if !slices.ContainsFunc(acls, func(b engine.ACL) bool {
				return a.Resource == b.Resource && a.Name == b.Name && a.Prefixed == b.Prefixed && slices.Equal(a.Operations, b.Operations)
			}) {
				acls = append(acls, a)
			}
		}
	}
	return append(acls, engine.ACL{
		Resource: "topic", Name: deadLetterTopic(name), Operations: []string{"READ"},
		Why: "the console's dead letters (GET /deadletters)",
	}, engine.ACL{
		Resource: "topic", Name: versions.DefaultTopic, Operations: []string{"CREATE", "READ", "WRITE", "DESCRIBE", "DESCRIBE_CONFIGS"},
		Why: "the versions' control topic: each version registers, the first is made active, and every instance follows which is",
	}, engine.ACL{
		Resource: "topic", Name: name + ".", Prefixed: true, Operations: []string{"CREATE", "READ", "WRITE", "DESCRIBE", "DESCRIBE_CONFIGS"},
		Why: "the catalog's capture: its topic and state topic",
	}), nil
}

// deadLetterTopic is where the store puts the records it cannot read.
func deadLetterTopic(name string) string { return name + "-dead-letters" }

// topicRecords counts a topic's records (end minus start offsets).
func topicRecords(ctx context.Context, cl *kgo.Client, topic string) (int64, error) {
	adm := kadm.NewClient(cl)
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return 0, err
	}
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err != nil {
		return 0, err
	}
	var n int64
	ends.Each(func(o kadm.ListedOffset) {
		if s, ok := starts.Lookup(o.Topic, o.Partition); ok {
			n += o.Offset - s.Offset
		}
	})
	return n, nil
}

// inCatalog refuses the sale of a shoe the catalog does not have before it
// reaches the aggregate, which decides from its own events alone, and
// prices a sale or a return that names no price at the catalog's price:
// the price is a fact of the sale, kept in its event. (Were it looked up
// by the views, in a join with the catalog table, a version computing
// them again from the history would find the catalog as it is loaded
// then — empty at first, or at today's prices — not as it was.) The
// catalog is a view, read through the store's own API (which asks the
// instance that holds the shoe).
type inCatalog struct {
	client *aggregate.Client[inventory.Command]
	url    string // the store's API
	token  string // its token, if it needs one
}

// NotInCatalog is the rejection code of a sale of a shoe the catalog lacks.
const NotInCatalog = "not-in-catalog"

func (c inCatalog) SubmitJSON(ctx context.Context, shoe string, envelope []byte, opts ...aggregate.SubmitOption) (aggregate.Outcome, error) {
	var e struct {
		Type string                     `json:"type"`
		Data map[string]json.RawMessage `json:"data"`
	}
	if json.Unmarshal(envelope, &e) != nil || (e.Type != "SellPair" && e.Type != "AcceptReturn") {
		return c.client.SubmitJSON(ctx, shoe, envelope, opts...)
	}
	var price int64
	if p, ok := e.Data["price"]; ok && json.Unmarshal(p, &price) == nil && price != 0 {
		return c.client.SubmitJSON(ctx, shoe, envelope, opts...)
	}
	item, found, err := c.item(ctx, shoe)
	switch {
	case err != nil:
		return aggregate.Outcome{}, err
	case !found && e.Type == "SellPair":
		return aggregate.Outcome{AggregateID: shoe, Status: aggregate.Rejected,
			Rejection: &aggregate.Rejection{Code: NotInCatalog, Message: fmt.Sprintf("the catalog has no shoe %q", shoe)}}, nil
	case !found:
		return c.client.SubmitJSON(ctx, shoe, envelope, opts...) // a return, refunded at no price
	}
	// The envelope as it came, with the price: a retry after a price change
	// is still the same request.
	var whole map[string]json.RawMessage
	if err := json.Unmarshal(envelope, &whole); err != nil {
		return aggregate.Outcome{}, err
	}
	if e.Data == nil {
		e.Data = map[string]json.RawMessage{}
	}
	e.Data["price"] = json.RawMessage(fmt.Sprint(item.PriceCents))
	data, err := json.Marshal(e.Data)
	if err != nil {
		return aggregate.Outcome{}, err
	}
	whole["data"] = data
	priced, err := json.Marshal(whole)
	if err != nil {
		return aggregate.Outcome{}, err
	}
	return c.client.SubmitJSON(ctx, shoe, priced, append(opts, aggregate.RequestedAs(envelope))...)
}

// item reads a shoe's catalog entry.
func (c inCatalog) item(ctx context.Context, shoe string) (CatalogItem, bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.url+"/views/catalog/keys/"+url.PathEscape(shoe), nil)
	if err != nil {
		return CatalogItem{}, false, err
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return CatalogItem{}, false, fmt.Errorf("shoestore: the catalog: %w", err)
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
		var kv struct {
			Value CatalogItem `json:"value"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&kv); err != nil {
			return CatalogItem{}, false, fmt.Errorf("shoestore: the catalog's %q: %w", shoe, err)
		}
		return kv.Value, true, nil
	case http.StatusNotFound:
		return CatalogItem{}, false, nil
	default:
		return CatalogItem{}, false, fmt.Errorf("shoestore: the catalog answered %s for %q", resp.Status, shoe)
	}
}

// CommandTypes are the inventory's commands, for the API's document.
func (c inCatalog) CommandTypes() map[string]reflect.Type { return c.client.CommandTypes() }
