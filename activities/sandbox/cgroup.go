package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// cgroupRoot is where cgroup v1 controllers are mounted.
var cgroupRoot = "/sys/fs/cgroup"

// cgroupParent groups Linefactory's sandboxes under each controller.
const cgroupParent = "linefactory"

// cgroupDir is a sandbox's group under a controller; the group name carries
// the driver root's hash so two data directories never share a group.
func cgroupDir(controller, group string) string {
	return filepath.Join(cgroupRoot, controller, cgroupParent, group)
}

// setupCgroups creates the sandbox's cgroups and applies its limits; it
// returns, per limit, what was applied or why not.
func setupCgroups(sb *Sandbox) {
	apply := func(key, controller string, files map[string]string) {
		if _, err := os.Stat(filepath.Join(cgroupRoot, controller)); err != nil {
			sb.LimitsApplied[key] = "not enforced: no cgroup v1 " + controller + " controller on this host"
			return
		}
		dir := cgroupDir(controller, sb.CgroupName)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			sb.LimitsApplied[key] = "not enforced: " + err.Error()
			return
		}
		for _, name := range sortedFileKeys(files) {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(files[name]), 0o644); err != nil {
				sb.LimitsApplied[key] = fmt.Sprintf("not enforced: write %s: %v", name, err)
				return
			}
		}
		sb.Cgroups = append(sb.Cgroups, controller)
		sb.LimitsApplied[key] = "enforced by cgroup " + dir
	}
	if sb.MemoryMB > 0 {
		apply("memory_mb", "memory", map[string]string{"memory.limit_in_bytes": strconv.FormatInt(int64(sb.MemoryMB)<<20, 10)})
	}
	if sb.Vcpus > 0 {
		apply("vcpus", "cpu", map[string]string{"cpu.cfs_period_us": "100000", "cpu.cfs_quota_us": strconv.Itoa(sb.Vcpus * 100000)})
	}
	apply("pause", "freezer", nil)
	if sb.LimitsApplied["pause"] != "" && strings.HasPrefix(sb.LimitsApplied["pause"], "enforced") {
		sb.LimitsApplied["pause"] = "freezer cgroup"
	} else {
		sb.LimitsApplied["pause"] = "SIGSTOP to the sandbox's process groups (no freezer cgroup)"
	}
}

func sortedFileKeys(m map[string]string) []string {
	// cpu.cfs_period_us must be set before cpu.cfs_quota_us
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	for i := 1; i < len(keys); i++ {
		for j := i; j > 0 && keys[j] > keys[j-1]; j-- {
			keys[j], keys[j-1] = keys[j-1], keys[j]
		}
	}
	return keys
}

func (sb *Sandbox) hasCgroup(controller string) bool {
	for _, c := range sb.Cgroups {
		if c == controller {
			return true
		}
	}
	return false
}

// joinCgroups moves a process into the sandbox's cgroups.
func joinCgroups(sb Sandbox, pid int) error {
	for _, c := range sb.Cgroups {
		if err := os.WriteFile(filepath.Join(cgroupDir(c, sb.CgroupName), "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
			return fmt.Errorf("join %s cgroup: %w", c, err)
		}
	}
	return nil
}

// freeze sets the sandbox's freezer state (FROZEN or THAWED) and waits for it.
func freeze(sb Sandbox, state string) error {
	path := filepath.Join(cgroupDir("freezer", sb.CgroupName), "freezer.state")
	if err := os.WriteFile(path, []byte(state), 0o644); err != nil {
		return err
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if strings.TrimSpace(string(data)) == state {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New("freezer did not reach " + state)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// removeCgroups kills what is left in the sandbox's cgroups and removes them.
func removeCgroups(sb Sandbox) {
	for _, c := range sb.Cgroups {
		dir := cgroupDir(c, sb.CgroupName)
		deadline := time.Now().Add(5 * time.Second)
		for {
			err := os.Remove(dir)
			if err == nil || errors.Is(err, os.ErrNotExist) || time.Now().After(deadline) {
				break
			}
			if data, rerr := os.ReadFile(filepath.Join(dir, "cgroup.procs")); rerr == nil {
				for _, f := range strings.Fields(string(data)) {
					if pid, perr := strconv.Atoi(f); perr == nil {
						killPid(pid)
					}
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}
