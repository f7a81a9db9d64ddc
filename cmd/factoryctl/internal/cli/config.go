package cli

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/BurntSushi/toml"
	"github.com/spf13/cobra"

	"github.com/linefactory/linefactory/cmd/factoryctl/internal/client"
)

// config is the config file: where the API is and the token to use.
type config struct {
	URL   string `toml:"url"`
	Token string `toml:"token"`
}

// configFile is --config, else $XDG_CONFIG_HOME/linefactory/config.toml,
// else ~/.config/linefactory/config.toml.
func (a *App) configFile() string {
	if a.configPath != "" {
		return a.configPath
	}
	if p := a.Getenv("FACTORYCTL_CONFIG"); p != "" {
		return p
	}
	dir := a.Getenv("XDG_CONFIG_HOME")
	if dir == "" {
		home := a.Getenv("HOME")
		if home == "" {
			home, _ = os.UserHomeDir()
		}
		dir = filepath.Join(home, ".config")
	}
	return filepath.Join(dir, "linefactory", "config.toml")
}

func (a *App) loadConfig() (config, error) {
	var cfg config
	p := a.configFile()
	data, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return cfg, nil
	}
	if err != nil {
		return cfg, err
	}
	if _, err := toml.Decode(string(data), &cfg); err != nil {
		return cfg, fmt.Errorf("config file %s: %w", p, err)
	}
	return cfg, nil
}

func (a *App) loginCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "login",
		Short: "Save the API URL and a token in the config file",
		Long: `login checks the URL and token against the API (GET /jobs) and saves them in the
config file (mode 0600). Without --token the token is read from standard input.`,
		Example: `  factoryctl login --url http://127.0.0.1:8080 --token lf_0123...
  ./bin/factoryd token create --name me --force | factoryctl login`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			url := firstNonEmpty(a.url, a.Getenv("FACTORY_URL"), defaultURL)
			token := firstNonEmpty(a.token, a.Getenv("FACTORY_TOKEN"))
			if token == "" {
				if a.isTerminal() {
					fmt.Fprint(a.Stderr, "token: ")
				}
				line, err := bufio.NewReader(a.Stdin).ReadString('\n')
				if err != nil && line == "" {
					return &exitError{code: ExitFailed, msg: "login: no token: pass --token or write it to standard input"}
				}
				token = strings.TrimSpace(line)
			}
			c := client.New(url, token)
			if err := c.Get(cmd.Context(), "/jobs", client.Query("limit", "1"), nil); err != nil {
				return fmt.Errorf("login: %w", err)
			}
			var b bytes.Buffer
			if err := toml.NewEncoder(&b).Encode(config{URL: url, Token: token}); err != nil {
				return err
			}
			p := a.configFile()
			if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
				return err
			}
			if err := os.WriteFile(p, b.Bytes(), 0o600); err != nil {
				return err
			}
			if err := os.Chmod(p, 0o600); err != nil {
				return err
			}
			fmt.Fprintf(a.Stderr, "logged in to %s; saved in %s\n", url, p)
			return nil
		},
	}
	return cmd
}
