// Package access owns the access tokens of the admin API: each with a
// name, a role (admin.Role) and, for a team token, its team. A token is
// "hst_" and 32 random bytes in base64url, shown once when it is made;
// the compacted topic <prefix>.access keeps only its SHA-256 digest, keyed
// by the token's id, a tombstone revoking it. Every instance follows that
// topic (Run), so a token made or revoked on one holds on every other as
// soon as it reads the record: in about a second, and the instance that
// wrote it at once.
//
// The Service judges presented tokens for the admin listener
// (admin.Server.Authenticate): unknown, revoked and expired tokens are
// refused alike. Which role may call which route is the admin package's
// (each route names its roles); this package owns the tokens only.
//
// Last use is kept in memory, per instance: a token's last use is when
// this instance last accepted it, so judging a token writes nothing and
// costs nothing that grows with traffic; an instance that restarted, or
// that a token has not reached, shows none.
//
// Bounds: at most Config.MaxTokens tokens (HOOKSTREAM_MAX_TOKENS): the
// API refuses one more (409), and a reader holds no more than that many
// whatever the topic holds, skipping and counting the rest like a record
// that does not decode (topics.Skipper).
package access
