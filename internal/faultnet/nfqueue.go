package faultnet

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The parts of the NFQUEUE netlink protocol (linux/netfilter/nfnetlink.h,
// nfnetlink_queue.h) a delayer uses.
const (
	nfnlSubsysQueue = 3
	nfqnlMsgPacket  = 0
	nfqnlMsgVerdict = 1
	nfqnlMsgConfig  = 2

	nfqaPacketHdr  = 1
	nfqaVerdictHdr = 2

	nfqaCfgCmd      = 1
	nfqaCfgParams   = 2
	nfqaCfgQueueMax = 3
	nfqaCfgMask     = 4
	nfqaCfgFlags    = 5

	nfqnlCfgCmdBind = 1
	nfqnlCopyMeta   = 1
	nfqaCfgFFailOpn = 1

	nfAccept = 1
)

// delayer holds the packets of one NFQUEUE queue and accepts each delay
// after it arrived, in arrival order: what netem's delay does on a link.
type delayer struct {
	fd    int
	queue uint16
	delay time.Duration
	held  chan held
	done  chan struct{}
	wg    sync.WaitGroup
	once  sync.Once
	seq   uint32
	mu    sync.Mutex // over writes to fd
}

type held struct {
	id  uint32
	due time.Time
}

// startDelayer binds queue in namespace ns and starts giving verdicts.
func startDelayer(ns string, queue uint16, delay time.Duration) (*delayer, error) {
	d := &delayer{queue: queue, delay: delay, held: make(chan held, 1<<16), done: make(chan struct{})}
	err := inNS(ns, func() error {
		fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_NETFILTER)
		if err != nil {
			return fmt.Errorf("netlink socket: %w", err)
		}
		d.fd = fd
		return nil
	})
	if err != nil {
		return nil, err
	}
	_ = unix.SetsockoptInt(d.fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 16<<20)
	// A receive that waits is woken now and then to see whether the
	// delayer was closed.
	_ = unix.SetsockoptTimeval(d.fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Usec: 200_000})
	if err := unix.Bind(d.fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		unix.Close(d.fd)
		return nil, fmt.Errorf("netlink bind: %w", err)
	}
	cmd := make([]byte, 4)
	cmd[0] = nfqnlCfgCmdBind
	binary.BigEndian.PutUint16(cmd[2:], unix.AF_INET)
	params := make([]byte, 5)
	binary.BigEndian.PutUint32(params, 0xffff)
	params[4] = nfqnlCopyMeta
	maxlen := binary.BigEndian.AppendUint32(nil, 1<<16)
	flags := binary.BigEndian.AppendUint32(nil, nfqaCfgFFailOpn)
	for _, attrs := range [][]attr{
		{{nfqaCfgCmd, cmd}},
		{{nfqaCfgParams, params}, {nfqaCfgQueueMax, maxlen}, {nfqaCfgFlags, flags}, {nfqaCfgMask, flags}},
	} {
		if err := d.request(nfqnlMsgConfig, attrs, true); err != nil {
			unix.Close(d.fd)
			return nil, fmt.Errorf("binding queue %d: %w", queue, err)
		}
	}
	d.wg.Add(2)
	go d.receive()
	go d.release()
	return d, nil
}

type attr struct {
	typ  uint16
	data []byte
}

// request sends one message to the queue's subsystem; with ack, it waits
// for the kernel's answer and returns its error.
func (d *delayer) request(msgType uint16, attrs []attr, ack bool) error {
	d.mu.Lock()
	d.seq++
	seq := d.seq
	body := []byte{unix.AF_UNSPEC, 0, 0, 0} // nfgenmsg: family, version, queue (big-endian)
	binary.BigEndian.PutUint16(body[2:], d.queue)
	for _, a := range attrs {
		l := 4 + len(a.data)
		b := make([]byte, (l+3)&^3)
		binary.NativeEndian.PutUint16(b[0:], uint16(l))
		binary.NativeEndian.PutUint16(b[2:], a.typ)
		copy(b[4:], a.data)
		body = append(body, b...)
	}
	flags := uint16(unix.NLM_F_REQUEST)
	if ack {
		flags |= unix.NLM_F_ACK
	}
	msg := make([]byte, unix.NLMSG_HDRLEN, unix.NLMSG_HDRLEN+len(body))
	binary.NativeEndian.PutUint32(msg[0:], uint32(unix.NLMSG_HDRLEN+len(body)))
	binary.NativeEndian.PutUint16(msg[4:], nfnlSubsysQueue<<8|msgType)
	binary.NativeEndian.PutUint16(msg[6:], flags)
	binary.NativeEndian.PutUint32(msg[8:], seq)
	msg = append(msg, body...)
	err := unix.Sendto(d.fd, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK})
	d.mu.Unlock()
	if err != nil || !ack {
		return err
	}
	buf := make([]byte, 1<<16)
	for {
		n, _, err := unix.Recvfrom(d.fd, buf, 0)
		if err != nil {
			return err
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			return err
		}
		for _, m := range msgs {
			if m.Header.Type == unix.NLMSG_ERROR && m.Header.Seq == seq && len(m.Data) >= 4 {
				if code := int32(binary.NativeEndian.Uint32(m.Data)); code != 0 {
					return unix.Errno(-code)
				}
				return nil
			}
		}
	}
}

// receive reads the queued packets' ids and hands them to release.
func (d *delayer) receive() {
	defer d.wg.Done()
	defer close(d.held)
	buf := make([]byte, 1<<16)
	for {
		select {
		case <-d.done:
			return
		default:
		}
		n, _, err := unix.Recvfrom(d.fd, buf, 0)
		if err != nil {
			if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) || errors.Is(err, unix.ENOBUFS) {
				continue
			}
			return
		}
		now := time.Now()
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			continue
		}
		for _, m := range msgs {
			if m.Header.Type != nfnlSubsysQueue<<8|nfqnlMsgPacket || len(m.Data) < 4 {
				continue
			}
			for b := m.Data[4:]; len(b) >= 4; {
				l := int(binary.NativeEndian.Uint16(b))
				if l < 4 || l > len(b) {
					break
				}
				if binary.NativeEndian.Uint16(b[2:])&0x7fff == nfqaPacketHdr && l >= 8 {
					select {
					case d.held <- held{id: binary.BigEndian.Uint32(b[4:]), due: now.Add(d.delay)}:
					case <-d.done:
						return
					}
				}
				b = b[min((l+3)&^3, len(b)):]
			}
		}
	}
}

// release accepts each held packet when it is due, or at once once the
// delayer is closing.
func (d *delayer) release() {
	defer d.wg.Done()
	for p := range d.held {
		if wait := time.Until(p.due); wait > 0 {
			select {
			case <-time.After(wait):
			case <-d.done:
			}
		}
		v := binary.BigEndian.AppendUint32(nil, nfAccept)
		v = binary.BigEndian.AppendUint32(v, p.id)
		_ = d.request(nfqnlMsgVerdict, []attr{{nfqaVerdictHdr, v}}, false)
	}
}

// close accepts what is held and closes the queue. The rule that fed it
// must be gone first: packets that reach a queue nobody binds pass
// (--queue-bypass).
func (d *delayer) close() {
	d.once.Do(func() {
		close(d.done)
		d.wg.Wait()
		unix.Close(d.fd)
	})
}
