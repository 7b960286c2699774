package secs

import (
	"math"
	"testing"
	"time"
)

func TestDuration(t *testing.T) {
	for _, c := range []struct {
		in   float64
		want time.Duration
	}{
		{0, 0}, {-1, 0}, {math.NaN(), 0}, {math.Inf(-1), 0},
		{1.5, 1500 * time.Millisecond}, {60, time.Minute},
		{1e300, Max}, {math.Inf(1), Max}, {math.MaxFloat64, Max}, {9223372037, Max},
	} {
		if got := Duration(c.in); got != c.want {
			t.Errorf("Duration(%g) = %v, want %v", c.in, got, c.want)
		}
	}
	now := time.Now()
	if got := After(now, Max); got.Before(now) {
		t.Errorf("After(now, Max) = %v, before now", got)
	}
}
