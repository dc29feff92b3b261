package main

import (
	"fmt"
	"io"
	"os"
	"runtime/pprof"
)

// cpuProfileEnv names a file the process writes its CPU profile to, with
// its PID appended (FILE.PID), for `go tool pprof`: how the hot path's cost
// in `agentsaga bench fleet` is found, since the fleet's workers are
// processes of their own that inherit the variable.
const cpuProfileEnv = "AGENTSAGA_CPUPROFILE"

// startCPUProfile starts the profile cpuProfileEnv asks for, if any, and
// returns what ends it and writes it out.
func startCPUProfile(stderr io.Writer) func() {
	path := os.Getenv(cpuProfileEnv)
	if path == "" {
		return func() {}
	}
	f, err := os.Create(fmt.Sprintf("%s.%d", path, os.Getpid()))
	if err == nil {
		err = pprof.StartCPUProfile(f)
	}
	if err != nil {
		fmt.Fprintf(stderr, "agentsaga: %s=%s: %v; running without a profile\n", cpuProfileEnv, path, err)
		return func() {}
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}
}
