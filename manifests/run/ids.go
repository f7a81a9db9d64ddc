package run

import (
	"encoding/hex"

	"github.com/google/uuid"
)

// Id prefixes of runs.
const (
	JobRunIDPrefix  = "jr_"
	LineRunIDPrefix = "lr_"
)

// NewID returns a new opaque, time-sortable id with the given prefix, such
// as "jr_0190…".
func NewID(prefix string) string {
	u, err := uuid.NewV7()
	if err != nil {
		u = uuid.New()
	}
	return prefix + hex.EncodeToString(u[:])
}

// NewJobRunID returns a new job run id.
func NewJobRunID() string { return NewID(JobRunIDPrefix) }

// NewLineRunID returns a new line run id.
func NewLineRunID() string { return NewID(LineRunIDPrefix) }

// JobRunWorkflowID is the workflow ID of a job run.
func JobRunWorkflowID(runID string) string { return "jobrun/" + runID }

// LineRunWorkflowID is the workflow ID of a line run.
func LineRunWorkflowID(runID string) string { return "linerun/" + runID }

// LineScheduleID is the id of the engine schedule that fires a line's
// schedule trigger.
func LineScheduleID(line string) string { return "lineschedule/" + line }

// JobScheduleID is the id of the engine schedule of a job's [schedule].
func JobScheduleID(job string) string { return "jobschedule/" + job }
