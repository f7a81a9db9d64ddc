package ports

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestMain lets the test binary act as a second process handing out ports
// (TestFreeAcrossProcesses).
func TestMain(m *testing.M) {
	if dir := os.Getenv("PORTS_TEST_CHILD_DIR"); dir != "" {
		claimDir = dir
		n, _ := strconv.Atoi(os.Getenv("PORTS_TEST_CHILD_N"))
		for range n {
			port, err := Free()
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
			fmt.Println(port)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func resetHanded() {
	mu.Lock()
	defer mu.Unlock()
	handed = map[int]bool{}
}

// Drawn at random from ~22,000 ports, 1,500 ports would repeat some 50
// times if each draw only checked that the port is free now.
func TestFreeNeverRepeatsInProcess(t *testing.T) {
	resetHanded()
	notADir := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(notADir, nil, 0o600))
	claimDir = notADir // no registry: the process's own memory alone
	seen := map[int]bool{}
	for range 1500 {
		port, err := Free()
		require.NoError(t, err)
		require.False(t, seen[port], "port %d handed out twice", port)
		seen[port] = true
	}
}

// Two processes drawing 600 ports each at the same time would share ~16
// without the claims file.
func TestFreeAcrossProcesses(t *testing.T) {
	resetHanded()
	claimDir = filepath.Join(t.TempDir(), "claims")
	const n = 600
	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), "PORTS_TEST_CHILD_DIR="+claimDir, "PORTS_TEST_CHILD_N="+strconv.Itoa(n))
	out, err := child.StdoutPipe()
	require.NoError(t, err)
	child.Stderr = os.Stderr
	require.NoError(t, child.Start())
	mine := map[int]bool{}
	for range n {
		port, err := Free()
		require.NoError(t, err)
		mine[port] = true
	}
	var shared []int
	sc := bufio.NewScanner(out)
	lines := 0
	for sc.Scan() {
		port, err := strconv.Atoi(sc.Text())
		require.NoError(t, err)
		lines++
		if mine[port] {
			shared = append(shared, port)
		}
	}
	require.NoError(t, child.Wait())
	require.Equal(t, n, lines)
	require.Empty(t, shared, "ports handed out by both processes")
}

func TestClaimsExpireAndStayFew(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "claims")
	require.NoError(t, os.MkdirAll(dir, 0o700))
	old := time.Now().Add(-ClaimFor - time.Second).UnixNano()
	fresh := time.Now().UnixNano()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "claims"),
		fmt.Appendf(nil, "20001 %d\n20002 %d\ngarbage\n", old, fresh), 0o600))
	r := openRegistry(dir)
	require.NotNil(t, r)
	require.False(t, r.claim(20002), "a claim younger than ClaimFor holds")
	require.True(t, r.claim(20001), "a claim older than ClaimFor is gone")
	require.False(t, r.claim(20001), "a port is claimed once")
	r.close()
	data, err := os.ReadFile(filepath.Join(dir, "claims"))
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	require.Len(t, lines, 2, "the file keeps the live claims only: %q", data)
}

// A claims directory others may write is not trusted (nor used).
func TestRegistryNeedsAPrivateDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "claims")
	require.NoError(t, os.MkdirAll(dir, 0o700))
	require.NoError(t, os.Chmod(dir, 0o777))
	require.Nil(t, openRegistry(dir))
	require.NoError(t, os.Chmod(dir, 0o700))
	r := openRegistry(dir)
	require.NotNil(t, r)
	r.close()
}
