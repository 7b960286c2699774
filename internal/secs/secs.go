// Package secs converts the float seconds of public protocols (E2B's
// timeouts, keepalive intervals) to a time.Duration without overflow.
package secs

import (
	"math"
	"time"
)

// Max is the longest duration a conversion yields (about 292 years).
const Max = time.Duration(math.MaxInt64)

// Duration converts s seconds, saturating: a value past what a Duration
// holds (1e300) is Max, not an overflow into the past; NaN and values <= 0
// are 0. Converting such a float to an integer directly is
// implementation-defined in Go (on amd64 it gives math.MinInt64).
func Duration(s float64) time.Duration {
	switch {
	case math.IsNaN(s) || s <= 0:
		return 0
	case s >= float64(Max)/float64(time.Second):
		return Max
	}
	return time.Duration(s * float64(time.Second))
}

// After is now+d, saturating at the latest time a Duration can reach.
func After(now time.Time, d time.Duration) time.Time {
	t := now.Add(d)
	if d > 0 && t.Before(now) {
		return now.Add(Max)
	}
	return t
}
