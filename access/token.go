package access

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/hookstream/hookstream/admin"
)

// Token is an access token as it is listed: never the token itself.
type Token struct {
	ID   string     `json:"id"`
	Name string     `json:"name"`
	Role admin.Role `json:"role"`
	// Team is a team token's team; empty for the other roles.
	Team      string    `json:"team,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	// ExpiresAt is when the token stops working; zero: never.
	ExpiresAt time.Time `json:"expires_at,omitzero"`
	// LastUsedAt is when this instance last accepted the token (kept in
	// memory, never written); nil: not since it started.
	LastUsedAt *time.Time `json:"last_used_at,omitempty"`
}

// Identity is who the holder of t is.
func (t Token) Identity() admin.Identity {
	return admin.Identity{TokenID: t.ID, Name: t.Name, Role: t.Role, Team: t.Team}
}

// expired reports whether t no longer works at now.
func (t Token) expired(now time.Time) bool { return !t.ExpiresAt.IsZero() && !now.Before(t.ExpiresAt) }

// Errors a caller branches on: the admin API answers them 400, 404 and
// 409 (admin.Error).
var (
	ErrInvalid  = admin.Invalid("invalid token")
	ErrNotFound = admin.NotFound("token not found")
	ErrLimit    = admin.Refused("token limit")
	ErrConflict = admin.Refused("tokens changed concurrently; try again")
)

// Validate reports every field of t that cannot be a token's.
func (t Token) Validate() error {
	var errs []error
	if !admin.ValidName(t.Name) {
		errs = append(errs, fmt.Errorf("%w: name: %.70q is not 1 to 63 of a-z, 0-9 and '-', starting with a letter or digit", ErrInvalid, t.Name))
	}
	if !slices.Contains(admin.Roles, t.Role) {
		errs = append(errs, fmt.Errorf("%w: role: %.20q is not admin, operator, viewer or team", ErrInvalid, t.Role))
	}
	switch {
	case t.Role == admin.Team && !admin.ValidName(t.Team):
		errs = append(errs, fmt.Errorf("%w: team: a team token needs a team of 1 to 63 of a-z, 0-9 and '-' (got %.70q)", ErrInvalid, t.Team))
	case t.Role != admin.Team && t.Team != "":
		errs = append(errs, fmt.Errorf("%w: team: only a team token has a team", ErrInvalid))
	}
	return errors.Join(errs...)
}

// stored is a token as the access topic keeps it: with the digest of its
// secret, never the secret.
type stored struct {
	Token
	// Digest is the hex SHA-256 of the token.
	Digest string `json:"digest"`
}

// tokenPrefix starts every token, so that scanners of leaked secrets
// recognise one.
const tokenPrefix = "hst_"

// newSecret is a new token: tokenPrefix and 32 random bytes, base64url.
func newSecret() string {
	var b [32]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return tokenPrefix + base64.RawURLEncoding.EncodeToString(b[:])
}

// newID is a new token id: "tok_" and 8 random bytes in hex, public.
func newID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "tok_" + hex.EncodeToString(b[:])
}

// digest is what the topic keeps of a token.
func digest(secret string) [sha256.Size]byte { return sha256.Sum256([]byte(secret)) }
