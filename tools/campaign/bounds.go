package main

import "time"

// rssBound is each role's bound on a process's peak resident set
// (invariant 5), as RELIABILITY.md's bounds table sets it at the
// campaign's settings (64 KiB body limit, 6 partitions): the live bytes
// its rows allow, twice over for Go's heap (GOGC=100), plus 64 MiB for
// the runtime, the binary and what no row counts.
var rssBound = map[string]int64{
	// 2 x (body budget 64 MiB + producer buffer 64 MiB + pull budget
	// 64 MiB) + 64 MiB.
	"ingest": 448 << 20,
	// 6 stores x (8 MiB cache + 2 x 4 MiB memtables) = 96 MiB, off the Go
	// heap; 2 x (fetches: 12 partitions x 1 MiB, twice buffered, 24 MiB;
	// envelopes prepared ahead 20 MiB; one poll's events in the
	// transaction 32 MiB); + 64 MiB.
	"processor": 384 << 20,
	// Its rows count records, not bytes (a lane's 1,000 judged records,
	// 10,000 pending retries): at 64 KiB a record they allow gigabytes
	// (RELIABILITY.md, Open). The bound is the campaign's former one for
	// every process.
	"dispatcher": 768 << 20,
}

// recoveryBound bounds every fault's recovery after its injection ended
// (invariant 7): every process ready, and an event accepted after the
// injection began delivered end to end.
const recoveryBound = time.Minute
