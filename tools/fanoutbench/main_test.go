package main

import "testing"

// TestSummarize: a row per number of subscriptions and dispatchers, the
// rates' medians over the rounds, every other figure the worst round's.
func TestSummarize(t *testing.T) {
	rows := []Row{
		{Round: 1, Subscriptions: 10, Dispatchers: 1, PerSecond: 100, RatioToCeiling: 1, Processes: []Dispatcher{{IdleRSS: 5, PeakRSS: 9, LoadSockets: 3}}},
		{Round: 1, Subscriptions: 1000, Dispatchers: 1, PerSecond: 90, RatioToCeiling: 0.9, Processes: []Dispatcher{{IdleRSS: 50, PeakRSS: 90}}},
		{Round: 2, Subscriptions: 10, Dispatchers: 1, PerSecond: 50, RatioToCeiling: 1, Processes: []Dispatcher{{IdleRSS: 7, PeakRSS: 8, LoadSockets: 2}}},
		{Round: 2, Subscriptions: 1000, Dispatchers: 1, PerSecond: 60, RatioToCeiling: 1.2, Processes: []Dispatcher{{IdleRSS: 40, PeakRSS: 95}}},
		{Round: 3, Subscriptions: 10, Dispatchers: 1, PerSecond: 80, RatioToCeiling: 1, Processes: []Dispatcher{{IdleRSS: 6, PeakRSS: 7, LoadSockets: 1}}},
		{Round: 3, Subscriptions: 1000, Dispatchers: 1, PerSecond: 64, RatioToCeiling: 0.8, Processes: []Dispatcher{{IdleRSS: 45, PeakRSS: 80}}},
	}
	got := summarize(rows)
	if len(got) != 2 || got[0].Subscriptions != 10 || got[1].Subscriptions != 1000 {
		t.Fatalf("summary rows: %+v, want 10 then 1000 subscriptions", got)
	}
	if s := got[0]; s.Round != 3 || s.PerSecond != 80 || s.Processes[0].IdleRSS != 7 || s.Processes[0].PeakRSS != 9 || s.Processes[0].LoadSockets != 3 {
		t.Errorf("10 subscriptions: %+v; want 3 rounds, median 80/s, worst idle RSS 7, peak 9, 3 connections", s)
	}
	if s := got[1]; s.PerSecond != 64 || s.RatioToCeiling != 0.9 || s.Processes[0].PeakRSS != 95 {
		t.Errorf("1000 subscriptions: %+v; want median 64/s and ratio 0.9 (each round's own), worst peak 95", s)
	}
}
