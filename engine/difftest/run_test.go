package difftest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"time"

	"github.com/oxbow-dev/oxbow/engine"
	"github.com/oxbow-dev/oxbow/engine/enginetest"
	"github.com/oxbow-dev/oxbow/internal/javabuild"
)

// cacheBytes is the record cache of a case with cache=1: Kafka Streams'
// default, statestore.cache.max.bytes = 10 MiB, on both sides.
const cacheBytes = 10 << 20

// runOxbow replays a case through Oxbow's in-memory driver. With the cache
// on, it commits after every step, as the TopologyTestDriver does after
// every record it processes.
func runOxbow(c *testCase) (res result) {
	defer func() {
		if v := recover(); v != nil {
			res.failed, res.failAt, res.failMsg = true, len(res.steps)-1, fmt.Sprintf("panic: %v", v)
		}
	}()
	fail := func(at int, err error) result {
		res.failed, res.failAt, res.failMsg = true, at, err.Error()
		return res
	}
	b := engine.NewBuilder()
	c.op.build(b, c.params)
	top, err := b.Build()
	if err != nil {
		return fail(-1, err)
	}
	var opts []enginetest.Option
	cached := c.params.bool("cache")
	if cached {
		opts = append(opts, enginetest.CacheBytes(cacheBytes))
	}
	d, err := enginetest.Start(top, opts...)
	if err != nil {
		return fail(-1, err)
	}
	defer d.Close()
	read := map[string]int{}
	for i, s := range c.steps {
		res.steps = append(res.steps, nil)
		if s.wall > 0 {
			err = d.TryAdvanceWallClock(time.Duration(s.wall) * time.Millisecond)
		} else {
			err = d.PipeBytes(s.topic, s.key, s.value, time.UnixMilli(s.ts))
		}
		if err == nil && cached {
			err = d.TryCommit()
		}
		if err != nil {
			return fail(i, err)
		}
		for _, t := range c.op.outputTopics() {
			msgs := d.Messages(t)
			for _, m := range msgs[read[t]:] {
				res.steps[i] = append(res.steps[i], record{topic: t, key: m.Key, value: m.Value, ts: m.Timestamp.UnixMilli()})
			}
			read[t] = len(msgs)
		}
	}
	return res
}

// kstreams is the Kafka Streams side: JVMs running dev.oxbow.difftest.Main,
// one per CPU, each fed cases on its stdin.
type kstreams struct {
	jvms []*jvm
}

type jvm struct {
	mu     sync.Mutex
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	in     *bufio.Writer
	out    *bufio.Reader
	stderr *tailBuffer
}

// errNoJava says that this machine cannot build or run the Kafka Streams side.
var errNoJava = errors.New("difftest: java and mvn are needed to build and run the Kafka Streams side (engine/difftest/kstreams)")

// startKStreams builds the Java module with Maven (into the repository's
// .cache/m2, as the bench does) and starts it.
func startKStreams() (*kstreams, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	classpath, err := javabuild.Classpath(ctx, "engine/difftest/kstreams")
	if errors.Is(err, javabuild.ErrNoJava) {
		return nil, errNoJava
	}
	if err != nil {
		return nil, fmt.Errorf("difftest: %w", err)
	}
	// RocksDB's files (each case's stores) are made and removed fastest in memory.
	tmp := os.TempDir()
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		tmp = "/dev/shm"
	}
	k := &kstreams{}
	for range max(1, runtime.NumCPU()) {
		j := &jvm{stderr: &tailBuffer{max: 64 << 10}}
		j.cmd = exec.Command("java", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Djava.io.tmpdir="+tmp,
			"-Ddifftest.stores="+*flagStores, "-cp", classpath, "dev.oxbow.difftest.Main")
		j.cmd.Stderr = j.stderr
		if j.stdin, err = j.cmd.StdinPipe(); err == nil {
			var stdout io.ReadCloser
			if stdout, err = j.cmd.StdoutPipe(); err == nil {
				err = j.cmd.Start()
				j.in, j.out = bufio.NewWriterSize(j.stdin, 1<<16), bufio.NewReaderSize(stdout, 1<<16)
			}
		}
		if err != nil {
			k.close()
			return nil, err
		}
		k.jvms = append(k.jvms, j)
	}
	return k, nil
}

// run replays cases through Kafka Streams and returns their results in
// order, sharing them among the JVMs.
func (k *kstreams) run(cases []*testCase) ([]result, error) {
	results := make([]result, len(cases))
	errs := make([]error, len(k.jvms))
	var wg sync.WaitGroup
	for i, j := range k.jvms {
		var mine []int
		for c := i; c < len(cases); c += len(k.jvms) {
			mine = append(mine, c)
		}
		if len(mine) == 0 {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = j.run(cases, mine, results)
		}()
	}
	wg.Wait()
	return results, errors.Join(errs...)
}

// run replays the cases of the given indexes, writing their results.
func (j *jvm) run(cases []*testCase, idx []int, results []result) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	werr := make(chan error, 1)
	go func() {
		for _, i := range idx {
			writeCase(j.in, cases[i])
		}
		werr <- j.in.Flush()
	}()
	for _, i := range idx {
		id, res, err := readResult(j.out)
		if err != nil {
			return fmt.Errorf("%w\nthe JVM's stderr ends:\n%s", err, j.stderr)
		}
		if id != cases[i].id {
			return fmt.Errorf("difftest: the Kafka Streams side answered case %s, want %s", id, cases[i].id)
		}
		results[i] = res
	}
	return <-werr
}

// close ends the JVMs: each exits at the end of its input.
func (k *kstreams) close() error {
	var errs []error
	for _, j := range k.jvms {
		j.mu.Lock()
		j.stdin.Close()
		if err := j.cmd.Wait(); err != nil {
			errs = append(errs, fmt.Errorf("difftest: the Kafka Streams side: %w\n%s", err, j.stderr))
		}
		j.mu.Unlock()
	}
	return errors.Join(errs...)
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   bytes.Buffer
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b.Write(p)
	if over := t.b.Len() - t.max; over > 0 {
		t.b.Next(over)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.b.String()
}
