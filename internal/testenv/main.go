package testenv

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/plumb-dev/plumb/api/v1alpha1/crd"
	"github.com/plumb-dev/plumb/internal/source/git/gittest"
)

// Needs is what a package's tests run against.
type Needs struct {
	// Cluster is the mode of the local control plane to start ("" for
	// none).
	Cluster Mode
	// CRDs installs plumb's CRDs into it.
	CRDs bool
	// Git starts a real Git server (gittest).
	Git bool
}

// Env is what Main started for the tests.
type Env struct {
	Cluster *Cluster
	Git     *gittest.Server
}

// Main is a package's TestMain: it starts what needs asks for, hands it to
// use, runs the tests, prints the control plane's logs when one failed,
// stops everything and exits with the tests' code. A part that cannot
// start (its binaries missing included) fails the package with the reason
// and the command that fixes it; it never skips.
//
//	func TestMain(m *testing.M) {
//		testenv.Main(m, testenv.Needs{Cluster: testenv.ModeAPI}, func(e *testenv.Env) { cluster = e.Cluster })
//	}
func Main(m *testing.M, needs Needs, use func(*Env)) {
	os.Exit(Run(m, needs, use))
}

// Tests runs a package's tests: a *testing.M, or a wrapper of one that
// does more around them.
type Tests interface{ Run() int }

// Run is Main for a TestMain that has more to do before it exits: it
// returns the tests' exit code.
func Run(m Tests, needs Needs, use func(*Env)) (code int) {
	env := &Env{}
	ran := false // the tests ran: a failure is theirs, not the setup's
	if needs.Git {
		s, err := gittest.Start()
		if err != nil {
			fmt.Fprintln(os.Stderr, "FAIL: starting the git server:", err)
			return 1
		}
		defer s.Stop()
		env.Git = s
	}
	if needs.Cluster != "" {
		c, err := Start(context.Background(), Options{Mode: needs.Cluster})
		if err != nil {
			fmt.Fprintf(os.Stderr, "FAIL: starting the local control plane: %v\n", err)
			return 1
		}
		defer func() {
			if ran && code != 0 {
				fmt.Fprintf(os.Stderr, "A test failed; logs of the local control plane (%s mode):\n", c.Mode)
				c.WriteLogs(os.Stderr, 200)
			}
			if err := c.Stop(); err != nil {
				fmt.Fprintf(os.Stderr, "stopping the local control plane: %v\n", err)
				if code == 0 {
					code = 1
				}
			}
		}()
		env.Cluster = c
		if needs.CRDs {
			if err := crd.Install(context.Background(), c.Config); err != nil {
				fmt.Fprintln(os.Stderr, "FAIL: installing plumb's CRDs:", err)
				return 1
			}
		}
	}
	use(env)
	ran = true
	return m.Run()
}
