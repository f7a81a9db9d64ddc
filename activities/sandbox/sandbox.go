// Package sandbox is where steps run: a Driver interface and the local
// driver, which gives each sandbox a workspace directory on this machine.
//
// Invariants:
//   - Isolated (the default, bwrap), a command sees only a read-only system
//     view, its workspace (/workspace) and its own /tmp, runs as the
//     sandbox's own unprivileged host uid in new user, mount, PID, IPC,
//     UTS and network namespaces, and reaches nothing of the host: offline
//     nothing at all, online (and for sources and setup scripts) the
//     internet through slirp4netns, never the host's loopback, addresses or
//     private ranges. Without a host that can isolate, NewLocal fails;
//     IsolationNone is the operator's explicit choice.
//   - A sandbox's commands share its network namespace, made (slirp4netns
//     attached, routes added) on first use and held by an open descriptor
//     of this process only: it dies with the worker, Delete and Reap (idle)
//     drop it, the next command makes it again. It belongs to the host's
//     user namespace, so no step can change it. Commands reaching Services,
//     and the network asked for in an offline sandbox, get one of their own.
//   - The only way out of an isolated command is what its caller asks for
//     in ExecRequest.Services: each a handler of the worker, served on a
//     socket of that command's own (0600, the sandbox's uid) and reached on
//     the command's own 127.0.0.1 through a forwarder that ends with it.
//   - Paths never escape a sandbox's workspace: workdirs are resolved (with
//     symlinks) and rejected if they leave it.
//   - Every command is in its cgroup before it runs; cancellation, timeout,
//     pause and delete act on the whole group, and Exec returns only when the
//     group is gone, so no orphan (not even a setsid one) outlives its step.
//     Groups exist only while a command runs and for cgroupLinger after
//     (a command's group is used again only once it is empty).
//   - internet_enabled = false is never silently ignored: a sandbox that
//     cannot be cut off fails with SANDBOX_PROVISIONING_FAILED.
//   - Step processes die with the worker (Pdeathsig, --die-with-parent) and
//     carry a marker in their environment, so a restarted worker kills what
//     a crashed one left behind (KillLeftovers).
//   - A non-zero exit is a result (ExecResult.ExitCode), not an error; an
//     error means the command could not be run or the sandbox failed.
package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/linefactory/linefactory/manifests"
)

// Error codes (SPEC "Errors").
const (
	CodeNotFound           = "SANDBOX_NOT_FOUND"
	CodeAlreadyExists      = "SANDBOX_ALREADY_EXISTS"
	CodeInvalidState       = "SANDBOX_INVALID_STATE"
	CodeProvisioningFailed = "SANDBOX_PROVISIONING_FAILED"
	CodeCommandNotFound    = "COMMAND_NOT_FOUND"
	CodeFileOperation      = "FILE_OPERATION_ERROR"
	CodeExecFailed         = "EXEC_FAILED"
)

// Error is a sandbox failure with its code.
type Error struct {
	Code string
	Msg  string
	Err  error
}

func (e *Error) Error() string {
	if e.Err != nil {
		return e.Msg + ": " + e.Err.Error()
	}
	return e.Msg
}

func (e *Error) Unwrap() error { return e.Err }

func errorf(code string, err error, format string, args ...any) *Error {
	return &Error{Code: code, Msg: fmt.Sprintf(format, args...), Err: err}
}

// CodeOf returns the code of a sandbox *Error in err's chain, or "".
func CodeOf(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// States of a sandbox. A sandbox is provisioning from the moment its
// directory exists until its sources and setup scripts have all succeeded:
// one left in that state by a crash is half-built, and Acquire redoes it
// (provision with the same key, ensure) or rejects it (reuse).
const (
	StateProvisioning = "provisioning"
	StateRunning      = "running"
	StatePaused       = "paused"
)

// Spec is what a task asks of its sandbox; templates are already rendered.
type Spec struct {
	Mode            string // provision, ensure, reuse
	Name            string // empty for provision: a name is generated
	Image           string
	Vcpus           int
	MemoryMB        int
	DiskGB          int
	InternetEnabled bool
	Env             map[string]string
	Sources         []manifests.GitSource
	SetupScripts    []manifests.SetupScript
	SnapshotName    string
	// SetupEnv is added to the environment of the setup scripts (the
	// params as SVC_PARAM_<NAME>).
	SetupEnv  map[string]string
	Lifecycle *manifests.Lifecycle
	RunID     string
	// Key makes provisioning idempotent: a provision whose name exists with
	// the same key (a retried or resumed attempt of the same run's task)
	// gets that sandbox back instead of SANDBOX_ALREADY_EXISTS.
	Key string
}

// Sandbox describes a sandbox.
type Sandbox struct {
	Name            string               `json:"name"`
	Root            string               `json:"root"` // the workspace directory
	State           string               `json:"state"`
	Image           string               `json:"image"`
	Vcpus           int                  `json:"vcpus"`
	MemoryMB        int                  `json:"memory_mb"`
	InternetEnabled bool                 `json:"internet_enabled"`
	Env             map[string]string    `json:"env"`
	Lifecycle       *manifests.Lifecycle `json:"lifecycle,omitempty"`
	CreatedAt       time.Time            `json:"created_at"`
	LastActiveAt    time.Time            `json:"last_active_at"`
	// LimitsApplied says which resource limits are enforced and why not.
	LimitsApplied map[string]string `json:"limits_applied"`
	// CgroupName names the sandbox's cgroup (under linefactory/ in each
	// hierarchy), which exists while a command runs in it.
	CgroupName string `json:"cgroup_name,omitempty"`
	// Mode is the Spec.Mode that made it.
	Mode string `json:"mode,omitempty"`
	// Isolation is the driver's isolation when it was made.
	Isolation string `json:"isolation,omitempty"`
	// HostUID owns its files and runs its commands on the host (isolated).
	HostUID int `json:"host_uid,omitempty"`
	// ProvisionKey is Spec.Key of the provision that made it.
	ProvisionKey string `json:"provision_key,omitempty"`
	// Created is true when Acquire made it (false when it reused one).
	Created bool `json:"-"`
}

// ExecRequest runs one command in a sandbox.
type ExecRequest struct {
	Sandbox string
	// Argv is the command: one element is run by `sh -c`; several are an
	// argument list whose first element is looked up in PATH.
	Argv    []string
	Workdir string // relative to the workspace
	Env     map[string]string
	// Binds are host directories the command sees (isolated: read-write at
	// the path given; their files are given to the sandbox's user). Host
	// paths under them, and under the workspace, in Argv and Env are
	// rewritten to where the command sees them.
	Binds map[string]string
	// ReadOnly are host files (the server configuration's harness scripts,
	// never a step's choice) an isolated command sees read-only at their
	// own path.
	ReadOnly []string
	// User is the user the command runs as inside the sandbox ("" for an
	// unprivileged default; see stepUser).
	User    string
	Stdout  io.Writer
	Stderr  io.Writer
	Timeout time.Duration // 0 = none
	// Network runs the command with the host's network even when the
	// sandbox has internet_enabled = false (sources and setup scripts).
	Network bool
	// Services are worker endpoints the command reaches on its own
	// 127.0.0.1 (isolated only; see Service).
	Services []Service
	// NextSoon tells that another command of the sandbox follows within
	// milliseconds (a job's next step): the cgroup this one leaves gets a
	// launcher for it meanwhile (cgroup v1, launcher.go).
	NextSoon bool
}

// ExecResult is the outcome of a command.
type ExecResult struct {
	ExitCode int
	TimedOut bool
	Signaled bool
	Duration time.Duration
}

// SnapshotInfo describes a stored snapshot.
type SnapshotInfo struct {
	Name string
	Path string
	Size int64
}

// Driver manages sandboxes.
type Driver interface {
	Acquire(ctx context.Context, spec Spec) (Sandbox, error)
	Get(ctx context.Context, name string) (Sandbox, error)
	Exec(ctx context.Context, req ExecRequest) (ExecResult, error)
	Snapshot(ctx context.Context, name, snapshot string) (SnapshotInfo, error)
	Pause(ctx context.Context, name string) error
	Resume(ctx context.Context, name string) error
	Delete(ctx context.Context, name string) error
}
