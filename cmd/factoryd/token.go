package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"text/tabwriter"

	"github.com/linefactory/linefactory/api"
	"github.com/linefactory/linefactory/store"
)

const tokenUsage = `usage:
  factoryd token create --name NAME [--scope read|write|admin] [--force]
  factoryd token list
  factoryd token revoke NAME
flags of every token command: [--data-dir DIR] [--database-url DSN]`

// runToken implements `factoryd token create|list|revoke`: it manages the
// tokens of the configured store directly (no running server needed).
func runToken(args []string) int {
	return tokenCommand(args, os.Stdout, os.Stderr)
}

func tokenCommand(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || (args[0] != "create" && args[0] != "list" && args[0] != "revoke") {
		fmt.Fprintln(stderr, tokenUsage)
		return 2
	}
	sub := args[0]
	fs := flag.NewFlagSet("token "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	name := fs.String("name", "", "token name (required, unique)")
	scope := fs.String("scope", api.ScopeWrite, "read, write or admin")
	force := fs.Bool("force", false, "replace a token of that name (its old secret stops working)")
	dataDir := fs.String("data-dir", env("FACTORY_DATA_DIR", ".factory"), "data directory (FACTORY_DATA_DIR)")
	dsn := fs.String("database-url", env("FACTORY_DATABASE_URL", ""), "store DSN (FACTORY_DATABASE_URL)")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	var rest []string
	if sub == "revoke" && fs.NArg() > 0 {
		// Flags may follow the name: factoryd token revoke me --data-dir x
		rest = []string{fs.Arg(0)}
		if err := fs.Parse(fs.Args()[1:]); err != nil {
			return 2
		}
		rest = append(rest, fs.Args()...)
	}
	if *dsn == "" {
		*dsn = *dataDir + "/factory.db"
	}
	switch sub {
	case "create":
		if !api.ValidTokenName(*name) || !api.ValidScope(*scope) || fs.NArg() > 0 {
			fmt.Fprintln(stderr, "token create: --name is required (letters, digits, '.', '_', '-') and --scope must be read, write or admin")
			return 2
		}
	case "list":
		if fs.NArg() > 0 {
			fmt.Fprintln(stderr, tokenUsage)
			return 2
		}
	case "revoke":
		if len(rest) != 1 {
			fmt.Fprintln(stderr, "token revoke: name the token: factoryd token revoke NAME")
			return 2
		}
	}
	ctx := context.Background()
	st, err := store.Open(ctx, *dsn)
	if err != nil {
		fmt.Fprintf(stderr, "token %s: %v\n", sub, err)
		return 1
	}
	defer st.Close()
	switch sub {
	case "list":
		return tokenList(ctx, st, stdout, stderr)
	case "revoke":
		return tokenRevoke(ctx, st, rest[0], stderr)
	}
	return tokenCreate(ctx, st, *dataDir, *name, *scope, *force, stdout, stderr)
}

// tokenRevoke deletes the token called name.
func tokenRevoke(ctx context.Context, st *store.Store, name string, stderr io.Writer) int {
	if err := st.DeleteToken(ctx, name); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			fmt.Fprintf(stderr, "token revoke: no token named %q\n", name)
		} else {
			fmt.Fprintf(stderr, "token revoke: %v\n", err)
		}
		return 1
	}
	fmt.Fprintf(stderr, "revoked token %q\n", name)
	return 0
}

// tokenCreate creates a token called name (replacing one of that name when
// force is set) and prints its secret.
func tokenCreate(ctx context.Context, st *store.Store, dataDir, name, scope string, force bool, stdout, stderr io.Writer) int {
	if force {
		if err := st.DeleteToken(ctx, name); err != nil && !errors.Is(err, store.ErrNotFound) {
			fmt.Fprintf(stderr, "token create: %v\n", err)
			return 1
		}
	}
	key, err := loadTokenKey(os.Getenv("FACTORY_TOKEN_KEY"), tokenKeyPath(dataDir))
	if err != nil {
		fmt.Fprintf(stderr, "token create: %v\n", err)
		return 1
	}
	secret := api.NewTokenSecret()
	if _, err := st.CreateToken(ctx, name, scope, key.Hash(secret)); err != nil {
		if errors.Is(err, store.ErrConflict) {
			fmt.Fprintf(stderr, "token create: a token named %q exists already (--force replaces it)\n", name)
		} else {
			fmt.Fprintf(stderr, "token create: %v\n", err)
		}
		return 1
	}
	fmt.Fprintln(stdout, secret)
	fmt.Fprintf(stderr, "created token %q with scope %s; it is shown only once\n", name, scope)
	return 0
}

func tokenList(ctx context.Context, st *store.Store, stdout, stderr io.Writer) int {
	toks, err := st.ListTokens(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "token list: %v\n", err)
		return 1
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSCOPE\tCREATED\tLAST USED")
	for _, t := range toks {
		used := "never"
		if t.LastUsedAt != nil {
			used = t.LastUsedAt.UTC().Format("2006-01-02T15:04:05Z")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", t.Name, t.Scope, t.CreatedAt.UTC().Format("2006-01-02T15:04:05Z"), used)
	}
	_ = tw.Flush()
	return 0
}
