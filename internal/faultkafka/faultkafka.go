// Package faultkafka gives fault campaigns the Kafka clusters of their
// own that scripts/services.sh runs (kafka-solo: one node; kafka-cluster:
// three), and the node actions the campaigns inflict: kill, start, pause,
// resume.
//
// A campaign holds its cluster alone: Get takes a lock that other test
// processes wait for (go test runs packages' test binaries side by side,
// and two campaigns killing the same broker would spoil each other), and
// releases it when the test ends.
package faultkafka

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/oxbow-dev/oxbow/engine/kafkaenv"
	"github.com/oxbow-dev/oxbow/internal/faultnet"
)

// Kind is the kafkaenv kind of a cluster's environment.
const Kind kafkaenv.Kind = "fault"

// Cluster is one of services.sh's clusters for fault campaigns.
type Cluster struct {
	Name   string // "solo" or "cluster"
	Nodes  int
	Env    *kafkaenv.Env
	script string
	env    []string // of the script
}

// Get returns the cluster named (solo, cluster) with its nodes running,
// held by this test until it ends. The cluster is started if it is not
// running; under CI (CI=true) it must be, since .ci/run starts it. The
// test is skipped with -short.
func Get(t *testing.T, name string, nodes int) *Cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("broker fault campaigns; not with -short")
	}
	c := &Cluster{Name: name, Nodes: nodes, script: script(t)}
	lock(t, name)
	variable := "OXBOW_KAFKA_" + strings.ToUpper(name)
	addrs := os.Getenv(variable)
	if addrs == "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is not set: .ci/run starts the cluster with scripts/services.sh start kafka-%s", variable, name)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		if out, err := c.run(ctx, "start", "kafka-"+name); err != nil {
			t.Skipf("cannot start kafka-%s: %v\n%s", name, err, out)
		}
		out, err := c.run(ctx, "env")
		if err != nil {
			t.Fatalf("services.sh env: %v\n%s", err, out)
		}
		for _, l := range strings.Split(string(out), "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(l), "export "+variable+"="); ok {
				addrs = v
			}
		}
		if addrs == "" {
			t.Fatalf("services.sh env names no %s after starting it:\n%s", variable, out)
		}
	}
	c.Env = kafkaenv.NewEnv(Kind, strings.Split(addrs, ","), nil)
	// A campaign that failed may have left a node down or paused; one
	// that ends leaves them all running.
	for i := 1; i <= nodes; i++ {
		c.Node(t, i, "resume")
	}
	t.Cleanup(func() {
		for i := 1; i <= nodes; i++ {
			c.Node(t, i, "resume")
		}
	})
	return c
}

// InNet starts the three-node cluster "net" on the hosts given (node i on
// hosts[i-1], at its address, port 9092), held by this test and stopped
// when it ends. Its hosts are network namespaces the test made
// (internal/faultnet), which must outlive the cluster: make them first.
func InNet(t *testing.T, hosts ...*faultnet.Host) *Cluster {
	t.Helper()
	if len(hosts) != 3 {
		t.Fatalf("faultkafka: kafka-net has 3 nodes, not %d", len(hosts))
	}
	c := &Cluster{Name: "net", Nodes: 3, script: script(t)}
	lock(t, "net")
	var pairs, addrs []string
	for _, h := range hosts {
		pairs = append(pairs, h.NS+"="+h.IP)
		addrs = append(addrs, h.IP+":9092")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if out, err := c.run(ctx, "stop", "kafka-net"); err != nil {
			t.Errorf("stopping kafka-net: %v\n%s", err, out)
		}
	})
	if out, err := c.run(ctx, "stop", "kafka-net"); err != nil { // what a killed test left
		t.Fatalf("stopping kafka-net: %v\n%s", err, out)
	}
	c.env = []string{"OXBOW_KAFKA_NET_HOSTS=" + strings.Join(pairs, ",")}
	if out, err := c.run(ctx, "start", "kafka-net"); err != nil {
		t.Fatalf("starting kafka-net: %v\n%s", err, out)
	}
	c.Env = kafkaenv.NewEnv(Kind, addrs, nil)
	return c
}

// Node does action (kill, start, pause, resume) to node i and returns
// when it is done (start: when the node answers). Resume resumes a paused
// node and starts one that is down.
func (c *Cluster) Node(t *testing.T, i int, action string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if action == "resume" {
		if _, err := c.run(ctx, "node", "kafka-"+c.Name, fmt.Sprint(i), "pid"); err != nil {
			action = "start"
		}
	}
	if out, err := c.run(ctx, "node", "kafka-"+c.Name, fmt.Sprint(i), action); err != nil {
		t.Fatalf("kafka-%s node %d %s: %v\n%s", c.Name, i, action, err, out)
	}
}

// script is scripts/services.sh's path.
func script(t *testing.T) string {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("faultkafka: no source file to find scripts/services.sh from")
	}
	return filepath.Join(filepath.Dir(file), "..", "..", "scripts", "services.sh")
}

func (c *Cluster) run(ctx context.Context, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, "bash", append([]string{c.script}, args...)...)
	cmd.Dir = filepath.Dir(filepath.Dir(c.script))
	if c.env != nil {
		cmd.Env = append(os.Environ(), c.env...)
	}
	// If ctx ends, the script is killed; its children (a JVM) may still
	// hold the output pipe, so stop waiting for them after a while.
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	return bytes.TrimSpace(out), err
}

// lock takes the cluster's lock for the test, waiting for another test
// process that holds it, and logs the wait if it is long.
func lock(t *testing.T, name string) {
	t.Helper()
	path := filepath.Join(os.TempDir(), "oxbow-kafka-"+name+".campaign.lock")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatalf("faultkafka: %v", err)
	}
	done := make(chan struct{})
	go func() {
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Logf("waiting for kafka-%s: another test process holds %s", name, path)
		}
	}()
	err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
	close(done)
	if err != nil {
		f.Close()
		t.Fatalf("faultkafka: locking %s: %v", path, err)
	}
	// Closing the file releases the lock (also when the process dies).
	t.Cleanup(func() { f.Close() })
}
