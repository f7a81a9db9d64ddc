package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/linefactory/linefactory/api"
	"github.com/linefactory/linefactory/store"
)

// runToken implements `factoryd token create --name NAME [--scope S]`: it
// makes a token in the configured store and prints its secret once.
func runToken(args []string) int {
	return tokenCommand(args, os.Stdout, os.Stderr)
}

func tokenCommand(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "create" {
		fmt.Fprintln(stderr, "usage: factoryd token create --name NAME [--scope read|write|admin] [--data-dir DIR] [--database-url DSN]")
		return 2
	}
	fs := flag.NewFlagSet("token create", flag.ContinueOnError)
	fs.SetOutput(stderr)
	name := fs.String("name", "", "token name (required, unique)")
	scope := fs.String("scope", api.ScopeWrite, "read, write or admin")
	dataDir := fs.String("data-dir", env("FACTORY_DATA_DIR", ".factory"), "data directory (FACTORY_DATA_DIR)")
	dsn := fs.String("database-url", env("FACTORY_DATABASE_URL", ""), "store DSN (FACTORY_DATABASE_URL)")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	if *name == "" || !api.ValidScope(*scope) {
		fmt.Fprintln(stderr, "token create: --name is required and --scope must be read, write or admin")
		return 2
	}
	if *dsn == "" {
		*dsn = *dataDir + "/factory.db"
	}
	ctx := context.Background()
	st, err := store.Open(ctx, *dsn)
	if err != nil {
		fmt.Fprintf(stderr, "token create: %v\n", err)
		return 1
	}
	defer st.Close()
	secret := api.NewTokenSecret()
	if _, err := st.CreateToken(ctx, *name, *scope, api.HashToken(secret)); err != nil {
		if errors.Is(err, store.ErrConflict) {
			fmt.Fprintf(stderr, "token create: a token named %q exists already\n", *name)
		} else {
			fmt.Fprintf(stderr, "token create: %v\n", err)
		}
		return 1
	}
	fmt.Fprintln(stdout, secret)
	fmt.Fprintf(stderr, "created token %q with scope %s; it is shown only once\n", *name, *scope)
	return 0
}

// seedBootstrapToken stores FACTORY_BOOTSTRAP_TOKEN as the admin token
// "bootstrap" unless a token with that secret exists.
func seedBootstrapToken(ctx context.Context, st *store.Store, secret string) error {
	if secret == "" {
		return nil
	}
	hash := api.HashToken(secret)
	if _, err := st.FindTokenByHash(ctx, hash); err == nil {
		return nil
	} else if !errors.Is(err, store.ErrNotFound) {
		return err
	}
	if old, err := st.GetTokenByName(ctx, "bootstrap"); err == nil && old.Hash != hash {
		// The bootstrap secret changed: the new one replaces the old.
		if err := st.DeleteToken(ctx, "bootstrap"); err != nil {
			return err
		}
	}
	_, err := st.CreateToken(ctx, "bootstrap", api.ScopeAdmin, hash)
	return err
}
