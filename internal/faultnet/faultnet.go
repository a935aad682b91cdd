// Package faultnet gives network-partition campaigns a network of their
// own: hosts in network namespaces the test makes, joined by veth pairs to
// a bridge in one more namespace, with addresses only inside those
// namespaces. A campaign runs processes on a host (Host.Command), talks to
// them from a host (Host.DialContext, Host.Client), and inflicts faults:
// Cut drops one host's packets to another (one direction; call it twice
// for both), Degrade delays a host's packets and drops some of them, and
// Heal undoes every fault.
//
// The kernel this project's CI runs on has no netem qdisc, so Degrade
// does what `tc netem delay D loss L` would with netfilter instead: a
// statistic match drops the share L of the host's packets, and the rest
// go through an NFQUEUE queue whose verdicts this package gives D after
// each packet was queued, in order.
//
// It needs root, ip (iproute2) and iptables. The test is skipped without
// them, or fails under CI (CI=true), whose script installs them.
package faultnet

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Net is a test's network: its hosts, the faults in force, and the
// NFQUEUE delayers that Degrade started.
type Net struct {
	prefix string // of its namespaces' names
	sw     string // the namespace of the bridge
	hosts  []*Host

	mu       sync.Mutex
	delayers []*delayer
}

// Host is one namespace on the network, with one address.
type Host struct {
	Name string // as the test named it
	NS   string // the namespace's name (ip netns)
	IP   string // its address on the network
	net  *Net
}

// Subnet is the network's /24; host i (from 0) has .11+i.
const Subnet = "10.77.0"

// New makes the network with one host per name, and removes it (stopping
// every process still in its namespaces) when the test ends.
func New(t testing.TB, names ...string) *Net {
	t.Helper()
	if testing.Short() {
		t.Skip("network-partition campaigns; not with -short")
	}
	for _, tool := range []string{"ip", "iptables"} {
		if _, err := exec.LookPath(tool); err != nil {
			missing(t, fmt.Sprintf("%s is not installed (Debian: iproute2, iptables)", tool))
		}
	}
	if os.Geteuid() != 0 {
		missing(t, "network namespaces need root")
	}
	sweep(t)
	n := &Net{prefix: fmt.Sprintf("oxnet%d", os.Getpid())}
	n.sw = n.prefix + "-sw"
	t.Cleanup(func() { n.remove(t) })
	run(t, "ip", "netns", "add", n.sw)
	run(t, "ip", "-n", n.sw, "link", "add", "br0", "type", "bridge")
	run(t, "ip", "-n", n.sw, "link", "set", "br0", "up")
	for i, name := range names {
		h := &Host{Name: name, NS: n.prefix + "-" + name, IP: fmt.Sprintf("%s.%d", Subnet, 11+i), net: n}
		n.hosts = append(n.hosts, h)
		port := fmt.Sprintf("p%d", i)
		run(t, "ip", "netns", "add", h.NS)
		run(t, "ip", "-n", n.sw, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", h.NS)
		run(t, "ip", "-n", n.sw, "link", "set", port, "master", "br0", "up")
		run(t, "ip", "-n", h.NS, "addr", "add", h.IP+"/24", "dev", "eth0")
		run(t, "ip", "-n", h.NS, "link", "set", "eth0", "up")
		run(t, "ip", "-n", h.NS, "link", "set", "lo", "up")
	}
	return n
}

// missing skips the test, or fails it under CI.
func missing(t testing.TB, why string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("faultnet: %s; .ci/run must provide it", why)
	}
	t.Skipf("faultnet: %s", why)
}

// Host returns the host named name.
func (n *Net) Host(name string) *Host {
	for _, h := range n.hosts {
		if h.Name == name {
			return h
		}
	}
	panic("faultnet: no host " + name)
}

// Command returns a command that runs name in h's namespace (ip netns
// exec replaces itself with it: the command's process is name's).
func (h *Host) Command(name string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", h.NS, name}, args...)...)
}

// Cut drops every packet from sends to to, until Heal. Packets the other
// way still pass. They are dropped where they arrive: to the sender they
// are lost in the network, not refused.
func (n *Net) Cut(t testing.TB, from, to *Host) {
	t.Helper()
	run(t, "ip", "netns", "exec", to.NS, "iptables", "-w", "-A", "INPUT", "-s", from.IP, "-j", "DROP")
}

// Degrade makes h's link slow and lossy until Heal: each packet h sends
// is dropped with probability loss (as is each it receives), and the rest
// leave delay after they were sent.
func (n *Net) Degrade(t testing.TB, h *Host, delay time.Duration, loss float64) {
	t.Helper()
	queue := 100 + n.index(h)
	d, err := startDelayer(h.NS, uint16(queue), delay)
	if err != nil {
		t.Fatalf("faultnet: the delayer on %s: %v", h.Name, err)
	}
	n.mu.Lock()
	n.delayers = append(n.delayers, d)
	n.mu.Unlock()
	// Losses happen where packets arrive, as Cut's do: h's on the
	// other hosts, the others' on h.
	p := fmt.Sprintf("%.4f", loss)
	lose := []string{"-m", "statistic", "--mode", "random", "--probability", p, "-j", "DROP"}
	if loss > 0 {
		for _, o := range n.hosts {
			if o == h {
				run(t, append([]string{"ip", "netns", "exec", h.NS, "iptables", "-w", "-A", "INPUT", "-i", "eth0"}, lose...)...)
			} else {
				run(t, append([]string{"ip", "netns", "exec", o.NS, "iptables", "-w", "-A", "INPUT", "-s", h.IP}, lose...)...)
			}
		}
	}
	run(t, "ip", "netns", "exec", h.NS, "iptables", "-w", "-A", "OUTPUT", "-o", "eth0", "-j", "NFQUEUE", "--queue-num", fmt.Sprint(queue), "--queue-bypass")
}

// Heal undoes every Cut and Degrade: the rules go first, then the
// delayers give the packets they hold their verdicts at once.
func (n *Net) Heal(t testing.TB) {
	t.Helper()
	for _, h := range n.hosts {
		run(t, "ip", "netns", "exec", h.NS, "iptables", "-w", "-F")
	}
	n.stopDelayers()
}

// stopDelayers closes the delayers Degrade started.
func (n *Net) stopDelayers() {
	n.mu.Lock()
	ds := n.delayers
	n.delayers = nil
	n.mu.Unlock()
	for _, d := range ds {
		d.close()
	}
}

func (n *Net) index(h *Host) int {
	for i, x := range n.hosts {
		if x == h {
			return i
		}
	}
	panic("faultnet: a host of another network")
}

// remove stops the delayers, kills what still runs in the namespaces and
// deletes them.
func (n *Net) remove(t testing.TB) {
	n.stopDelayers()
	for _, ns := range append(n.namespaces(), n.sw) {
		deleteNS(t, ns)
	}
}

// sweep removes the namespaces of networks whose test process is gone (a
// test killed before its cleanups ran), with what still runs in them.
func sweep(t testing.TB) {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		return
	}
	for _, l := range strings.Split(string(out), "\n") {
		f := strings.Fields(l)
		if len(f) == 0 {
			continue
		}
		var pid int
		if _, err := fmt.Sscanf(f[0], "oxnet%d-", &pid); err != nil || pid == os.Getpid() {
			continue
		}
		if err := syscall.Kill(pid, 0); err == nil || err == syscall.EPERM {
			continue // its test still runs
		}
		t.Logf("faultnet: removing %s, left by process %d", f[0], pid)
		deleteNS(t, f[0])
	}
}

// deleteNS kills what runs in namespace ns and deletes it.
func deleteNS(t testing.TB, ns string) {
	if out, err := exec.Command("ip", "netns", "pids", ns).Output(); err == nil {
		for _, f := range strings.Fields(string(out)) {
			var pid int
			if _, err := fmt.Sscan(f, &pid); err == nil {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
	if out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput(); err != nil {
		t.Logf("faultnet: ip netns del %s: %v %s", ns, err, bytes.TrimSpace(out))
	}
}

func (n *Net) namespaces() []string {
	var out []string
	for _, h := range n.hosts {
		out = append(out, h.NS)
	}
	return out
}

func run(t testing.TB, args ...string) {
	t.Helper()
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("faultnet: %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// inNS calls fn on a thread that is in namespace ns: sockets fn creates
// belong to ns for their lifetime, wherever they are used later.
func inNS(ns string, fn func() error) error {
	target, err := unix.Open("/run/netns/"+ns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("faultnet: namespace %s: %w", ns, err)
	}
	defer unix.Close(target)
	runtime.LockOSThread()
	own, err := unix.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer unix.Close(own)
	if err := unix.Setns(target, unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("faultnet: entering %s: %w", ns, err)
	}
	ferr := fn()
	if err := unix.Setns(own, unix.CLONE_NEWNET); err != nil {
		// The thread stays locked, so the runtime ends it with the
		// goroutine rather than give it to another in ns.
		return fmt.Errorf("faultnet: leaving %s: %w", ns, err)
	}
	runtime.UnlockOSThread()
	return ferr
}

// DialContext dials from h: the connection's socket is in h's namespace.
func (h *Host) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	var c net.Conn
	err := inNS(h.NS, func() error {
		var err error
		c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
		return err
	})
	return c, err
}

// Client returns an HTTP client whose requests leave from h.
func (h *Host) Client(timeout time.Duration) *http.Client {
	return &http.Client{Timeout: timeout, Transport: &http.Transport{DialContext: h.DialContext, MaxIdleConnsPerHost: 8}}
}
