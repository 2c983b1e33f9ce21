package redisstore

import (
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// ClientOptions says how to reach Redis. The zero ClientOptions is invalid:
// Addrs is required.
type ClientOptions struct {
	// Addrs are "host:port" addresses. One address (and no MasterName)
	// means a single server; several mean Redis Cluster seed nodes; with
	// MasterName they are Sentinels. Required: empty is an error.
	Addrs []string

	// MasterName, if set, is the Sentinel master name: Addrs are then
	// Sentinel addresses. Empty means no Sentinel.
	MasterName string

	// Username for Redis ACLs. Empty means the default user.
	Username string

	// Password, if set, authenticates the connection. At most one of
	// Password and PasswordFile may be set; both empty means no password.
	Password string

	// PasswordFile, if set, names a file whose content, without a trailing
	// newline, is the password. It is read once, by NewClient. Empty means
	// none.
	PasswordFile string

	// DB is the database number on a single server or Sentinel master.
	// Zero means database 0; it must be 0 for Redis Cluster.
	DB int

	// TLS, if non-nil, is used for every connection. Nil means plain TCP.
	TLS *tls.Config

	// PoolSize is the most connections kept per Redis node. Zero means
	// go-redis's default (10 per CPU).
	PoolSize int

	// DialTimeout bounds establishing a connection outside a call's own
	// deadline. Zero means 1 s.
	DialTimeout time.Duration

	// MinIdleConns is how many idle connections the pool keeps open per
	// Redis node, so that a call rarely pays for a new connection (a TLS
	// handshake can take longer than a call's Timeout). Zero means none
	// kept; it must not be negative.
	MinIdleConns int

	// SentinelUsername is the ACL user for the Sentinels (with
	// MasterName), which may have credentials of their own. Empty means
	// the default user.
	SentinelUsername string

	// SentinelPassword, if set, authenticates to the Sentinels. At most
	// one of SentinelPassword and SentinelPasswordFile may be set; both
	// empty means the Sentinels need no password.
	SentinelPassword string

	// SentinelPasswordFile, if set, names a file holding the Sentinels'
	// password, read as PasswordFile is. Empty means none.
	SentinelPasswordFile string
}

// NewClient returns a go-redis client for opts with the options a [Store]
// relies on: MaxRetries -1 (never retry a command: a retried acquire script
// could count a permit twice), DialerRetries 1 (one dial per call, so that
// a refused connection fails the call at once with its own error rather
// than after the call's whole timeout), ContextTimeoutEnabled (honour each
// call's deadline), and maintenance notifications off (no extra
// handshake). It
// connects lazily: a bad address or password shows up on the first call,
// not here. It returns an error naming the field when opts is invalid or
// PasswordFile cannot be read. The caller closes the client after the
// Stores using it.
func NewClient(opts ClientOptions) (redis.UniversalClient, error) {
	u, err := opts.universal()
	if err != nil {
		return nil, err
	}
	return redis.NewUniversalClient(u), nil
}

func (o ClientOptions) universal() (*redis.UniversalOptions, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	password, err := secret(o.Password, o.PasswordFile, "password file")
	if err != nil {
		return nil, err
	}
	sentinelPassword, err := secret(o.SentinelPassword, o.SentinelPasswordFile, "sentinel password file")
	if err != nil {
		return nil, err
	}
	dial := o.DialTimeout
	if dial == 0 {
		dial = time.Second
	}
	return &redis.UniversalOptions{
		Addrs:                 append([]string(nil), o.Addrs...),
		MasterName:            o.MasterName,
		Username:              o.Username,
		Password:              password,
		DB:                    o.DB,
		TLSConfig:             o.TLS,
		PoolSize:              o.PoolSize,
		MinIdleConns:          o.MinIdleConns,
		SentinelUsername:      o.SentinelUsername,
		SentinelPassword:      sentinelPassword,
		DialTimeout:           dial,
		MaxRetries:            -1,
		DialerRetries:         1,
		ContextTimeoutEnabled: true,
		ClientName:            "portcullis",
		MaintNotificationsConfig: &maintnotifications.Config{
			Mode: maintnotifications.ModeDisabled,
		},
	}, nil
}

// secret returns value, or the content of file without a trailing newline.
func secret(value, file, what string) (string, error) {
	if file == "" {
		return value, nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("redisstore: read %s: %w", what, err)
	}
	return strings.TrimRight(string(b), "\r\n"), nil
}

func (o ClientOptions) validate() error {
	switch {
	case len(o.Addrs) == 0:
		return fmt.Errorf("redisstore: Addrs is required")
	case o.Password != "" && o.PasswordFile != "":
		return fmt.Errorf("redisstore: set Password or PasswordFile, not both")
	case o.DB < 0:
		return fmt.Errorf("redisstore: DB must not be negative (got %d)", o.DB)
	case o.DB != 0 && len(o.Addrs) > 1 && o.MasterName == "":
		return fmt.Errorf("redisstore: DB must be 0 with several Addrs (Redis Cluster has only database 0)")
	case o.PoolSize < 0:
		return fmt.Errorf("redisstore: PoolSize must not be negative (got %d)", o.PoolSize)
	case o.DialTimeout < 0:
		return fmt.Errorf("redisstore: DialTimeout must not be negative (got %v)", o.DialTimeout)
	case o.MinIdleConns < 0:
		return fmt.Errorf("redisstore: MinIdleConns must not be negative (got %d)", o.MinIdleConns)
	case o.SentinelPassword != "" && o.SentinelPasswordFile != "":
		return fmt.Errorf("redisstore: set SentinelPassword or SentinelPasswordFile, not both")
	case o.MasterName == "" && (o.SentinelUsername != "" || o.SentinelPassword != "" || o.SentinelPasswordFile != ""):
		return fmt.Errorf("redisstore: Sentinel credentials need MasterName")
	}
	for i, a := range o.Addrs {
		if err := checkAddr(a); err != nil {
			return fmt.Errorf("redisstore: Addrs[%d]: %w", i, err)
		}
	}
	return nil
}

// checkAddr accepts "host:port" with a non-empty host and a port in
// 1..65535.
func checkAddr(a string) error {
	host, port, err := net.SplitHostPort(a)
	if err != nil {
		return fmt.Errorf("%q is not host:port: %w", a, err)
	}
	if host == "" {
		return fmt.Errorf("%q has no host", a)
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("%q: port must be 1..65535", a)
	}
	return nil
}
