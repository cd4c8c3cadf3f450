package wire

import "fmt"

// Page sizes of every list call: the HTTP `limit` of the content and task
// routes and the coordinator's gRPC ListContent and ListTasks follow this
// one rule, so no request gets a whole namespace in one response. A limit
// of 0 (or none) means DefaultPageSize; more than MaxPageSize is refused,
// not clamped, so a caller that asked for more learns it must page with
// start_id instead of silently getting less. Answers carry the total.
const (
	MaxPageSize     = 1000
	DefaultPageSize = MaxPageSize
)

// PageLimit applies the page-size rule to a requested limit.
func PageLimit(n uint64) (uint32, error) {
	if n == 0 {
		return DefaultPageSize, nil
	}
	if n > MaxPageSize {
		return 0, fmt.Errorf("limit %d is larger than the maximum page size %d; page with start_id", n, MaxPageSize)
	}
	return uint32(n), nil
}
