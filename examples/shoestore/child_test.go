package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// child is a service running in a child process: the crash campaign's
// (the test binary run again) or the walkthrough's (a built program).
type child struct {
	name   string // what the messages call it
	cmd    *exec.Cmd
	url    string // where it serves
	exited chan struct{}
	mu     sync.Mutex
	out    bytes.Buffer // its output, stdout and stderr
	file   *os.File     // a copy of out under OXBOW_CRASH_LOGDIR, or nil
}

func (c *child) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.file != nil {
		_, _ = c.file.Write(p)
	}
	return c.out.Write(p)
}

// output is the child's whole output so far.
func (c *child) output() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.out.String()
}

// tail is the end of the child's output.
func (c *child) tail() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	b := c.out.String()
	if len(b) > 3000 {
		b = "…" + b[len(b)-3000:]
	}
	return b
}

// startChild starts cmd and waits until a line of its standard output
// gives the URL it serves (served reads it from a line); the child is
// killed at the end of the test if it is still running.
func startChild(t *testing.T, name string, cmd *exec.Cmd, served func(line string) (url string, ok bool)) *child {
	t.Helper()
	c := &child{name: name, cmd: cmd, exited: make(chan struct{})}
	if dir := os.Getenv(childLogDirEnv); dir != "" {
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("%s-%s-%03d.log", strings.ReplaceAll(t.Name(), "/", "_"), name, childStarts.Add(1))))
		if err != nil {
			t.Fatal(err)
		}
		c.file = f
	}
	cmd.Stderr = c
	// Killed with the test binary, also when a signal ends it before its
	// cleanups run.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	running.Store(c, nil)
	urls := make(chan string, 1)
	go func() {
		defer close(c.exited)
		defer running.Delete(c)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if u, ok := served(sc.Text()); ok {
				select {
				case urls <- u:
				default:
				}
			}
			fmt.Fprintln(c, sc.Text())
		}
		_ = cmd.Wait()
	}()
	t.Cleanup(func() {
		select {
		case <-c.exited:
		default:
			_ = cmd.Process.Kill()
			<-c.exited
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.file != nil {
			_ = c.file.Close()
		}
	})
	select {
	case c.url = <-urls:
	case <-c.exited:
		t.Fatalf("the %s exited before it served:\n%s", name, c.tail())
	case <-time.After(2 * time.Minute):
		_ = cmd.Process.Kill()
		t.Fatalf("the %s did not serve within 2 minutes:\n%s", name, c.tail())
	}
	return c
}

// running holds the children that have not exited, for killRunning.
var running sync.Map // *child → nil

// killRunning kills every child still running and waits for it to end:
// for a test that a signal ends before its cleanups run, so that no child
// writes to what the test then removes.
func killRunning() {
	running.Range(func(k, _ any) bool {
		c := k.(*child)
		_ = c.cmd.Process.Kill()
		<-c.exited
		return true
	})
}

// kill kills the child (SIGKILL), which must still be running.
func (c *child) kill(t *testing.T) {
	t.Helper()
	select {
	case <-c.exited:
		t.Fatalf("the %s exited by itself:\n%s", c.name, c.tail())
	default:
	}
	_ = c.cmd.Process.Signal(syscall.SIGKILL)
	<-c.exited
}

// stop stops the child with SIGTERM, as Ctrl-C does, and checks that it
// exits cleanly within a minute.
func (c *child) stop(t *testing.T) {
	t.Helper()
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.exited:
	case <-time.After(time.Minute):
		_ = c.cmd.Process.Kill()
		t.Fatalf("the %s did not stop within a minute of SIGTERM:\n%s", c.name, c.tail())
	}
	if code := c.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("the %s exited with %d after SIGTERM:\n%s", c.name, code, c.tail())
	}
}

// childLogDirEnv, when set, names a directory where each child started
// keeps its whole output, logged at DEBUG, one file per start: the way to
// diagnose a failed campaign.
const childLogDirEnv = "OXBOW_CRASH_LOGDIR"

var childStarts atomic.Int64

// dumpOnSignal makes a child write every goroutine's stack to its
// standard error on each SIGUSR1, until ctx ends: what a campaign asks
// for when a command waits past its bound.
func dumpOnSignal(ctx context.Context) {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGUSR1)
	go func() {
		defer signal.Stop(sig)
		for {
			select {
			case <-ctx.Done():
				return
			case <-sig:
				fmt.Fprintf(os.Stderr, "GOROUTINES at %s\n", time.Now().Format(time.RFC3339Nano))
				_ = pprof.Lookup("goroutine").WriteTo(os.Stderr, 2)
			}
		}
	}()
}

// dump asks the child for its goroutines' stacks (dumpOnSignal), which
// land in its output.
func (c *child) dump() {
	_ = c.cmd.Process.Signal(syscall.SIGUSR1)
}
