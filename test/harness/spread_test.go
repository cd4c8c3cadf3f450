package harness

import (
	"slices"
	"testing"
)

func TestSpread(t *testing.T) {
	for _, c := range []struct {
		n, max int
		want   []int
	}{
		{0, 50, nil},
		{3, 50, []int{0, 1, 2}},
		{10, 4, []int{0, 3, 6, 9}},
		{5, 1, []int{4}},
		{101, 5, []int{0, 25, 50, 75, 100}},
	} {
		if got := Spread(c.n, c.max); !slices.Equal(got, c.want) {
			t.Errorf("Spread(%d, %d) = %v, want %v", c.n, c.max, got, c.want)
		}
	}
	// Long runs: exactly max distinct ascending indices, first and last in.
	for _, n := range []int{51, 52, 99, 1178, 5000} {
		got := Spread(n, 50)
		if len(got) != 50 || got[0] != 0 || got[49] != n-1 || !slices.IsSorted(got) || len(slices.Compact(slices.Clone(got))) != 50 {
			t.Errorf("Spread(%d, 50) = %v", n, got)
		}
	}
}
