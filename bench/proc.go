package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

type procStats struct{ cpuSeconds, peakRSSMB float64 }

// readProc reads a process's CPU seconds (user + system, all its threads)
// and peak RSS.
func readProc(pid int) (procStats, error) {
	var s procStats
	var err error
	if s.cpuSeconds, err = cpuSeconds(pid); err != nil {
		return s, err
	}
	kb, err := procStatusKB(pid, "VmHWM")
	s.peakRSSMB = kb / 1024
	return s, err
}

// procStatusKB reads a field in kB of /proc/<pid>/status (VmRSS, VmHWM).
func procStatusKB(pid int, field string) (float64, error) {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 64)
		}
	}
	return 0, fmt.Errorf("/proc/%d/status has no %s", pid, field)
}

// cpuSeconds reads a process's CPU seconds (utime + stime of
// /proc/<pid>/stat); -1 for no process (pid 0).
func cpuSeconds(pid int) (float64, error) {
	if pid <= 0 {
		return -1, nil
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return -1, err
	}
	// Fields after the command name, which is in parentheses.
	rest := string(stat[strings.LastIndexByte(string(stat), ')')+2:])
	f := strings.Fields(rest)
	if len(f) <= 12 {
		return -1, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100, nil // USER_HZ
}

// brokerProcess finds the broker's process on this machine: the one
// scripts/services.sh started (its run dir's kafka.pid), when the bench's
// brokers are its address; else the only kafka.Kafka process. 0 if
// neither.
func brokerProcess(brokers []string) (int, string) {
	if root, err := repoRoot(); err == nil {
		run := filepath.Join(root, ".cache", "run", "kafka")
		if d := os.Getenv("OXBOW_CACHE_DIR"); d != "" {
			run = filepath.Join(d, "run", "kafka")
		}
		addr, _ := os.ReadFile(filepath.Join(run, "address"))
		pid, _ := os.ReadFile(filepath.Join(run, "kafka.pid"))
		if n, err := strconv.Atoi(strings.TrimSpace(string(pid))); err == nil && isBroker(n) && strings.Join(brokers, ",") == strings.TrimSpace(string(addr)) {
			return n, "scripts/services.sh's kafka.pid"
		}
	}
	out, _ := exec.Command("pgrep", "-f", "kafka[.]Kafka").Output()
	var pids []int
	for _, f := range strings.Fields(string(out)) {
		if n, err := strconv.Atoi(f); err == nil && isBroker(n) {
			pids = append(pids, n)
		}
	}
	if len(pids) == 1 {
		return pids[0], "the only kafka.Kafka process (pgrep)"
	}
	return 0, fmt.Sprintf("not found (%d kafka.Kafka processes, none of them scripts/services.sh's at %s)", len(pids), strings.Join(brokers, ","))
}

func isBroker(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return err == nil && strings.Contains(string(b), "kafka.Kafka")
}

// jvmFlags are a Java process's -X flags (its heap, its collector).
func jvmFlags(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return ""
	}
	var flags []string
	for _, a := range strings.Split(string(b), "\x00") {
		if strings.HasPrefix(a, "-Xm") || strings.HasPrefix(a, "-XX:+Use") {
			flags = append(flags, a)
		}
	}
	return strings.Join(flags, " ")
}

// pinning is where the processes run: the broker (and the harness) on
// some CPUs, each measured process on the others.
type pinning struct {
	engineCPUs, brokerCPUs string // taskset lists; "" no pinning
	brokerPID              int
	brokerFound            string // how the broker was found
	restore                string // the broker's affinity mask before
	note                   string // for the report
}

// pin pins the broker and this process to the lower half of the CPUs and
// leaves the upper half to the measured processes (taskset), where there
// are 2 CPUs or more and taskset; undo restores the broker's affinity.
func pin(brokers []string, want bool) (p *pinning, undo func()) {
	p = &pinning{}
	p.brokerPID, p.brokerFound = brokerProcess(brokers)
	undo = func() {}
	n := runtime.NumCPU()
	_, err := exec.LookPath("taskset")
	switch {
	case !want:
		p.note = "nothing pinned (-pin=false): the broker, the harness and the measured process share every CPU"
		return p, undo
	case n < 2 || err != nil:
		p.note = fmt.Sprintf("nothing pinned (%d CPUs, taskset: %v)", n, err == nil)
		return p, undo
	case p.brokerPID == 0:
		p.note = "nothing pinned: the broker's process was " + p.brokerFound
		return p, undo
	}
	half := n / 2
	p.brokerCPUs, p.engineCPUs = cpuRange(0, half-1), cpuRange(half, n-1)
	out, err := exec.Command("taskset", "-p", strconv.Itoa(p.brokerPID)).Output()
	if err != nil {
		p.note = fmt.Sprintf("nothing pinned: reading the broker's affinity: %v", err)
		p.brokerCPUs, p.engineCPUs = "", ""
		return p, undo
	}
	if i := strings.LastIndexByte(string(out), ':'); i >= 0 {
		p.restore = strings.TrimSpace(string(out[i+1:]))
	}
	for _, pid := range []int{p.brokerPID, os.Getpid()} {
		if err := exec.Command("taskset", "-a", "-p", "-c", p.brokerCPUs, strconv.Itoa(pid)).Run(); err != nil {
			p.note = fmt.Sprintf("nothing pinned: taskset on pid %d: %v", pid, err)
			p.brokerCPUs, p.engineCPUs = "", ""
			return p, undo
		}
	}
	p.note = fmt.Sprintf("the broker (pid %d, every thread) and the harness on CPU %s; each measured process (engine or baseline) on CPU %s (taskset)",
		p.brokerPID, p.brokerCPUs, p.engineCPUs)
	undo = func() {
		if p.restore != "" {
			_ = exec.Command("taskset", "-a", "-p", p.restore, strconv.Itoa(p.brokerPID)).Run()
		}
	}
	return p, undo
}

func cpuRange(a, b int) string {
	if a == b {
		return strconv.Itoa(a)
	}
	return fmt.Sprintf("%d-%d", a, b)
}

// command makes a measured process's command: on the engine's CPUs if
// pinned, SIGTERM when ctx ends (killed 90 s later if still running),
// SIGKILL if the harness dies first (Pdeathsig), so that no child
// outlives it.
func (p *pinning) command(ctx context.Context, env []string, name string, args ...string) *exec.Cmd {
	if p != nil && p.engineCPUs != "" {
		args = append([]string{"-c", p.engineCPUs, name}, args...)
		name = "taskset"
	}
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = env
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 90 * time.Second
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return cmd
}
