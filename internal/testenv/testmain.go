package testenv

import (
	"context"
	"fmt"
	"os"
	"testing"
)

// RunTests is for a package's TestMain: it starts a cluster, hands it to use,
// runs the tests, prints every component's log when a test failed, and stops
// the cluster. A cluster that cannot start (binaries missing included) fails
// the package with the reason; it never skips. It returns the exit code.
//
//	func TestMain(m *testing.M) {
//		os.Exit(testenv.RunTests(m, testenv.Options{}, func(c *testenv.Cluster) { cluster = c }))
//	}
func RunTests(m Tests, opts Options, use func(*Cluster)) int {
	c, err := Start(context.Background(), opts)
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: starting the local control plane: %v\n", err)
		return 1
	}
	use(c)
	code := m.Run()
	if code != 0 {
		fmt.Fprintf(os.Stderr, "A test failed; logs of the local control plane (%s mode):\n", c.Mode)
		c.WriteLogs(os.Stderr, 200)
	}
	if err := c.Stop(); err != nil {
		fmt.Fprintf(os.Stderr, "stopping the local control plane: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// FreeAddrsForTest is FreeAddrs for a test, which it fails when no port
// can be had.
func FreeAddrsForTest(t testing.TB, n int) []string {
	t.Helper()
	addrs, err := FreeAddrs(n)
	if err != nil {
		t.Fatal(err)
	}
	return addrs
}
