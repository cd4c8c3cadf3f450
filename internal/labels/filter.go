// Package labels parses and evaluates label-filter expressions such as
// `key=value`, `key!=value`, `size>3`, `size<=10`.
package labels

// SKELETON: signatures are the contract.

// Filter is a conjunction of parsed expressions.
type Filter struct{}

// Parse parses expressions; all must hold for Match to be true.
func Parse(exprs []string) (Filter, error) { panic("todo") }

// Match evaluates the filter against labels whose values are JSON text.
func (f Filter) Match(labels map[string]string) bool { panic("todo") }
