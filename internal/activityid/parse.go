package activityid

import (
	"strconv"
	"strings"
)

// ParseTool reads the turn and the place in it of a tool call's
// activity ID (Tool: step-007-call-2-search); ok is false for any other ID,
// a sub-activity's (.../give-up) included.
func ParseTool(id string) (step, n int, ok bool) {
	rest, found := strings.CutPrefix(id, "step-")
	if !found {
		return 0, 0, false
	}
	stepText, rest, found := strings.Cut(rest, "-call-")
	if !found {
		return 0, 0, false
	}
	nText, name, found := strings.Cut(rest, "-")
	if !found || name == "" || strings.Contains(name, "/") {
		return 0, 0, false
	}
	step, err1 := strconv.Atoi(stepText)
	n, err2 := strconv.Atoi(nText)
	return step, n, err1 == nil && err2 == nil
}
