package cliflags

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"
)

// Annotations of the flags a config file may give as a YAML list or
// mapping rather than a string (MarkList, MarkKeyValues).
const (
	listAnnotation     = "meteor_config_list"
	keyValueAnnotation = "meteor_config_key_values"
)

// MarkList lets a config file give each of the named flags, which take
// comma-separated values on the command line, as a YAML list.
func MarkList(f *pflag.FlagSet, names ...string) {
	for _, n := range names {
		mustAnnotate(f, n, listAnnotation)
	}
}

// MarkKeyValues lets a config file give each of the named flags, which
// take k=v,k2=v2 on the command line (KeyValues), as a YAML mapping.
func MarkKeyValues(f *pflag.FlagSet, names ...string) {
	for _, n := range names {
		mustAnnotate(f, n, keyValueAnnotation)
	}
}

func mustAnnotate(f *pflag.FlagSet, name, key string) {
	if err := f.SetAnnotation(name, key, []string{"true"}); err != nil {
		panic(err) // a flag name misspelt in the program
	}
}

// Config is the --config flag of a long-running command (server, agent):
// a YAML file whose keys are the command's flag names, read before the
// command runs. Flags given on the command line win over the file, the
// file over the flags' defaults.
type Config struct {
	Path string
}

// Register adds --config to f.
func (c *Config) Register(f *pflag.FlagSet) {
	f.StringVar(&c.Path, "config", "", "YAML file of flag values, keyed by flag name without the dashes (node-id: eu-1); flags on the command line override it (docs/config.md)")
}

// Apply reads the file --config names, if any, into the other flags of f.
func (c *Config) Apply(f *pflag.FlagSet) error {
	if c.Path == "" {
		return nil
	}
	data, err := os.ReadFile(c.Path)
	if err != nil {
		return fmt.Errorf("--config: %w", err)
	}
	if err := ApplyConfig(f, data); err != nil {
		return fmt.Errorf("config %s: %w", c.Path, err)
	}
	return nil
}

// ApplyConfig sets the flags of f from a config file's content: a YAML
// mapping from flag names (without the dashes) to values. A flag already
// set on the command line (Changed) keeps its value. Scalars are given to
// the flag as they are written; a list is allowed for flags marked with
// MarkList (joined with commas), a mapping for flags marked with
// MarkKeyValues (k=v joined with commas). An unknown key, a key given
// twice, a key without a value or a value the flag does not take is an
// error naming its line; the command is not to run then.
func ApplyConfig(f *pflag.FlagSet, data []byte) error {
	values, err := parseConfig(f, data)
	if err != nil {
		return err
	}
	for _, v := range values {
		if f.Changed(v.name) {
			continue
		}
		if err := f.Set(v.name, v.value); err != nil {
			return fmt.Errorf("line %d: %s: %w", v.line, v.name, err)
		}
	}
	return nil
}

// configValue is one key of a config file, as the flag's string value.
type configValue struct {
	name, value string
	line        int
}

// parseConfig checks a config file against the flags of f and returns its
// values in the file's order.
func parseConfig(f *pflag.FlagSet, data []byte) ([]configValue, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil // an empty file sets nothing
		}
		return nil, err
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return nil, fmt.Errorf("line %d: a second YAML document; a config file holds one mapping", extra.Line)
	} else if !errors.Is(err, io.EOF) {
		return nil, err
	}
	root := &doc
	if root.Kind == yaml.DocumentNode {
		if len(root.Content) == 0 {
			return nil, nil
		}
		root = root.Content[0]
	}
	if root.Kind == yaml.ScalarNode && root.ShortTag() == "!!null" {
		return nil, nil // only comments
	}
	if root.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("line %d: want a mapping of flag names to values (node-id: eu-1), not %s", root.Line, kindName(root))
	}
	seen := map[string]int{}
	var out []configValue
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			return nil, fmt.Errorf("line %d: a key must be a flag name, not %s", k.Line, kindName(k))
		}
		name := k.Value
		if first, dup := seen[name]; dup {
			return nil, fmt.Errorf("line %d: key %q given twice (first on line %d)", k.Line, name, first)
		}
		seen[name] = k.Line
		fl := f.Lookup(name)
		switch {
		case name == "config" || name == "help":
			return nil, fmt.Errorf("line %d: key %q cannot be set in a config file", k.Line, name)
		case fl == nil:
			return nil, fmt.Errorf("line %d: unknown key %q: there is no flag --%s (the keys are the flags of --help, without the dashes)", k.Line, name, name)
		case fl.Deprecated != "":
			return nil, fmt.Errorf("line %d: key %q is deprecated: %s", k.Line, name, fl.Deprecated)
		}
		value, err := flagValue(fl, v)
		if err != nil {
			return nil, fmt.Errorf("line %d: %s: %w", v.Line, name, err)
		}
		out = append(out, configValue{name: name, value: value, line: v.Line})
	}
	return out, nil
}

// flagValue turns a YAML value into the string the flag takes on the
// command line.
func flagValue(fl *pflag.Flag, v *yaml.Node) (string, error) {
	switch v.Kind {
	case yaml.ScalarNode:
		if v.ShortTag() == "!!null" {
			return "", errors.New("no value (write \"\" for an empty string)")
		}
		return v.Value, nil
	case yaml.SequenceNode:
		if fl.Annotations[listAnnotation] == nil {
			return "", fmt.Errorf("takes one value, not a list")
		}
		items := make([]string, 0, len(v.Content))
		for _, it := range v.Content {
			if it.Kind != yaml.ScalarNode || it.ShortTag() == "!!null" {
				return "", fmt.Errorf("line %d: a list item must be a plain value", it.Line)
			}
			if strings.Contains(it.Value, ",") {
				return "", fmt.Errorf("line %d: list item %q holds a comma", it.Line, it.Value)
			}
			items = append(items, it.Value)
		}
		return strings.Join(items, ","), nil
	case yaml.MappingNode:
		if fl.Annotations[keyValueAnnotation] == nil {
			return "", fmt.Errorf("takes one value, not a mapping")
		}
		seen := map[string]int{}
		var pairs []string
		for i := 0; i+1 < len(v.Content); i += 2 {
			k, val := v.Content[i], v.Content[i+1]
			if k.Kind != yaml.ScalarNode || val.Kind != yaml.ScalarNode || val.ShortTag() == "!!null" {
				return "", fmt.Errorf("line %d: want key: value with plain values", k.Line)
			}
			if first, dup := seen[k.Value]; dup {
				return "", fmt.Errorf("line %d: key %q given twice (first on line %d)", k.Line, k.Value, first)
			}
			seen[k.Value] = k.Line
			if strings.ContainsAny(k.Value, ",=") || strings.Contains(val.Value, ",") {
				return "", fmt.Errorf("line %d: %s: %s: keys hold no comma or =, values no comma", k.Line, k.Value, val.Value)
			}
			pairs = append(pairs, k.Value+"="+val.Value)
		}
		return strings.Join(pairs, ","), nil
	case yaml.AliasNode:
		return "", errors.New("YAML aliases are not supported in a config file")
	}
	return "", fmt.Errorf("unsupported value (%s)", kindName(v))
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.SequenceNode:
		return "a list"
	case yaml.MappingNode:
		return "a mapping"
	case yaml.AliasNode:
		return "an alias"
	case yaml.ScalarNode:
		return fmt.Sprintf("the value %q", n.Value)
	}
	return "a document"
}

// Reference writes a Markdown table of the keys a config file for f takes:
// every flag but --config and --help, sorted, with its kind of value, its
// default and its description.
func Reference(w io.Writer, f *pflag.FlagSet) {
	var flags []*pflag.Flag
	f.VisitAll(func(fl *pflag.Flag) {
		if fl.Name != "config" && fl.Name != "help" && fl.Deprecated == "" && !fl.Hidden {
			flags = append(flags, fl)
		}
	})
	sort.Slice(flags, func(i, j int) bool { return flags[i].Name < flags[j].Name })
	fmt.Fprintln(w, "| key | flag | value | default | what it sets |")
	fmt.Fprintln(w, "|---|---|---|---|---|")
	for _, fl := range flags {
		typ := fl.Value.Type()
		switch {
		case fl.Annotations[listAnnotation] != nil:
			typ = "list of strings"
		case fl.Annotations[keyValueAnnotation] != nil:
			typ = "mapping"
		}
		def := fl.DefValue
		if def == "" {
			def = "—"
		} else {
			def = "`" + def + "`"
		}
		usage := strings.ReplaceAll(fl.Usage, "|", `\|`)
		fmt.Fprintf(w, "| `%s` | `--%s` | %s | %s | %s |\n", fl.Name, fl.Name, typ, def, usage)
	}
}
