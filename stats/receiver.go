package stats

// Answers are a receiver's answers to one source's requests since it
// started (ingest.Handler.Stats): what the console charts per minute
// beside the topics' counts, and /api/stats shows of the rejected ones.
type Answers struct {
	Accepted   int64 // 202: written to Kafka
	Duplicates int64 // 200: a duplicate on the fast path
	Rejected   int64 // any other status
}
