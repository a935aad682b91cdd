package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os/exec"
	"sync"
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
}

func (c *child) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
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
