package main

import (
	"fmt"

	"github.com/prometheus/procfs"
)

// processUsage is what /proc says a process has used so far.
type processUsage struct {
	// CPUSeconds is user plus system time.
	CPUSeconds float64
	// RSSBytes is the resident set.
	RSSBytes int64
}

// usageOf reads a process's CPU time and resident memory from /proc.
func usageOf(pid int) (processUsage, error) {
	proc, err := procfs.NewProc(pid)
	if err != nil {
		return processUsage{}, fmt.Errorf("reading /proc/%d: %w", pid, err)
	}
	stat, err := proc.Stat()
	if err != nil {
		return processUsage{}, fmt.Errorf("reading /proc/%d/stat: %w", pid, err)
	}
	return processUsage{CPUSeconds: stat.CPUTime(), RSSBytes: int64(stat.ResidentMemory())}, nil
}

// cpuOf sums the CPU seconds the processes have used so far.
func cpuOf(pids []int) (float64, error) {
	total := 0.0
	for _, pid := range pids {
		u, err := usageOf(pid)
		if err != nil {
			return 0, err
		}
		total += u.CPUSeconds
	}
	return total, nil
}

// numCPU is how many CPUs the kernel reports online.
func numCPU() int {
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return 0
	}
	info, err := fs.CPUInfo()
	if err != nil {
		return 0
	}
	return len(info)
}

// cpuSplit is the CPU seconds the controller and the servers have used so
// far, apart.
func cpuSplit(controller int, servers []int) (own, server float64, err error) {
	if own, err = cpuOf([]int{controller}); err != nil {
		return 0, 0, err
	}
	server, err = cpuOf(servers)
	return own, server, err
}
