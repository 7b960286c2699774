package console

import (
	"sync"
	"time"
)

// serve keeps no metrics history (GET /sandboxes/{id}/metrics is one
// sample, taken now), so the console keeps the samples it takes: one
// every few seconds while a page of the team shows the sandbox. Bounded:
// maxPoints a sandbox (about an hour at one sample each 5 s) and
// maxTracked sandboxes, the least recently sampled dropped first.
const (
	maxPoints  = 720
	maxTracked = 2000
	minGap     = 2 * time.Second
)

type point struct {
	T      int64   `json:"t"` // unix ms
	CPU    float64 `json:"cpu"`
	Mem    int64   `json:"mem"`
	MemMax int64   `json:"memMax"`
}

type series struct {
	team   string
	points []point
	last   time.Time
}

type history struct {
	mu sync.Mutex
	m  map[string]*series // by sandbox id
}

func newHistory() *history { return &history{m: map[string]*series{}} }

// add records a sample of team's sandbox id; samples closer than minGap to
// the previous one are dropped (several tabs polling add no points).
func (h *history) add(team, id string, p point, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.m[id]
	if s == nil || s.team != team {
		if len(h.m) >= maxTracked {
			var oldest string
			var at time.Time
			for k, v := range h.m {
				if oldest == "" || v.last.Before(at) {
					oldest, at = k, v.last
				}
			}
			delete(h.m, oldest)
		}
		s = &series{team: team}
		h.m[id] = s
	}
	if n := len(s.points); n > 0 && now.Sub(time.UnixMilli(s.points[n-1].T)) < minGap {
		return
	}
	s.last = now
	if len(s.points) >= maxPoints {
		s.points = append(s.points[:0], s.points[1:]...)
	}
	s.points = append(s.points, p)
}

// get is a copy of team's samples of id (none for another team's).
func (h *history) get(team, id string) []point {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.m[id]
	if s == nil || s.team != team {
		return []point{}
	}
	return append([]point(nil), s.points...)
}

func (h *history) forget(id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.m, id)
}
