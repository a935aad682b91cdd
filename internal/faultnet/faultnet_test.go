package faultnet

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"
	"time"
)

// listen listens on h, on a socket in h's namespace.
func listen(t *testing.T, h *Host, network string) (l net.Listener, pc net.PacketConn) {
	t.Helper()
	err := inNS(h.NS, func() error {
		var err error
		if network == "udp" {
			pc, err = net.ListenPacket("udp", h.IP+":0")
		} else {
			l, err = net.Listen("tcp", h.IP+":0")
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if l != nil {
			l.Close()
		}
		if pc != nil {
			pc.Close()
		}
	})
	return l, pc
}

// echo serves lines back on l until it closes.
func echo(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			_, _ = io.Copy(c, c)
		}()
	}
}

// roundTrip dials addr from h and times one line's echo.
func roundTrip(h *Host, addr string, limit time.Duration) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	c, err := h.DialContext(ctx, "tcp", addr)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(limit))
	start := time.Now()
	if _, err := fmt.Fprintln(c, "ping"); err != nil {
		return 0, err
	}
	if _, err := bufio.NewReader(c).ReadString('\n'); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

// datagrams sends n datagrams from h to addr and counts those pc reads.
func datagrams(t *testing.T, h *Host, pc net.PacketConn, n int) int {
	t.Helper()
	var c net.Conn
	if err := inNS(h.NS, func() error {
		var err error
		c, err = net.Dial("udp", pc.LocalAddr().String())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := range n {
		if _, err := fmt.Fprintf(c, "%d", i); err != nil {
			t.Fatal(err)
		}
	}
	got := 0
	buf := make([]byte, 64)
	for {
		_ = pc.SetReadDeadline(time.Now().Add(time.Second))
		if _, _, err := pc.ReadFrom(buf); err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return got
			}
			t.Fatal(err)
		}
		got++
	}
}

func TestCutAndHeal(t *testing.T) {
	n := New(t, "a", "b")
	a, b := n.Host("a"), n.Host("b")
	l, _ := listen(t, b, "tcp")
	go echo(l)
	if _, err := roundTrip(a, l.Addr().String(), 5*time.Second); err != nil {
		t.Fatalf("a to b before any fault: %v", err)
	}

	// One direction: a's datagrams to b are lost, b's to a arrive.
	_, atA := listen(t, a, "udp")
	_, atB := listen(t, b, "udp")
	n.Cut(t, a, b)
	if got := datagrams(t, a, atB, 20); got != 0 {
		t.Errorf("a to b cut: %d of 20 datagrams arrived", got)
	}
	if got := datagrams(t, b, atA, 20); got != 20 {
		t.Errorf("b to a not cut: %d of 20 datagrams arrived", got)
	}
	if _, err := roundTrip(a, l.Addr().String(), 2*time.Second); err == nil {
		t.Error("a reached b over TCP through the cut")
	}

	n.Heal(t)
	if _, err := roundTrip(a, l.Addr().String(), 5*time.Second); err != nil {
		t.Fatalf("a to b healed: %v", err)
	}
	if got := datagrams(t, a, atB, 20); got != 20 {
		t.Errorf("a to b healed: %d of 20 datagrams arrived", got)
	}
}

func TestDegrade(t *testing.T) {
	n := New(t, "a", "b")
	a, b := n.Host("a"), n.Host("b")
	l, _ := listen(t, b, "tcp")
	go echo(l)
	base, err := roundTrip(a, l.Addr().String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}

	const delay = 300 * time.Millisecond
	n.Degrade(t, a, delay, 0)
	slow, err := roundTrip(a, l.Addr().String(), 10*time.Second)
	if err != nil {
		t.Fatalf("a to b delayed: %v", err)
	}
	t.Logf("a line's round trip: %v, then %v delayed by %v", base, slow, delay)
	if slow < delay {
		t.Errorf("a line's round trip took %v with a delay of %v on a's link", slow, delay)
	}
	n.Heal(t)

	// Half of a's datagrams are lost, the other half arrive.
	_, atB := listen(t, b, "udp")
	n.Degrade(t, a, 0, 0.5)
	got := datagrams(t, a, atB, 400)
	t.Logf("%d of 400 datagrams arrived with 50%% loss", got)
	if got < 120 || got > 280 { // ±8 standard deviations
		t.Errorf("%d of 400 datagrams arrived with 50%% loss", got)
	}
	n.Heal(t)
	if got := datagrams(t, a, atB, 50); got != 50 {
		t.Errorf("healed: %d of 50 datagrams arrived", got)
	}
	if took, err := roundTrip(a, l.Addr().String(), 5*time.Second); err != nil || took >= delay {
		t.Errorf("healed: a line's round trip %v, %v", took, err)
	}
}
