package tarn

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// instanceIDFile holds, in the data folder, the id an instance generated on its first start.
const instanceIDFile = "instance-id"

// instanceID is this instance's static group membership id (group.instance.id): the configured
// one, else the one kept in the data folder, made on the first start. Keeping it with the
// stores ties it to what the instance holds: a restart with the same folder rejoins as the
// same member and takes its partitions back at once; a fresh folder is a new member.
func instanceID(cfg Config) (string, error) {
	if cfg.InstanceID != "" {
		return cfg.InstanceID, nil
	}
	path := filepath.Join(cfg.DataDir, instanceIDFile)
	raw, err := os.ReadFile(path)
	switch {
	case err == nil:
		id := strings.TrimSpace(string(raw))
		if !validInstanceID(id) {
			return "", fmt.Errorf("%s holds %q, not an instance id; delete the file to make a new one", path, id)
		}
		return id, nil
	case !errors.Is(err, fs.ErrNotExist):
		return "", fmt.Errorf("read the instance id: %w", err)
	}
	host, _ := os.Hostname()
	id := sanitizeID(host)
	if id == "" {
		id = "tarn"
	}
	suffix := make([]byte, 4)
	rand.Read(suffix)
	id = truncate(id, 48) + "-" + hex.EncodeToString(suffix)
	if err := os.WriteFile(path, []byte(id+"\n"), 0o644); err != nil {
		return "", fmt.Errorf("keep the instance id: %w", err)
	}
	return id, nil
}

// validInstanceID reports whether id can be a group.instance.id and part of a transactional
// id: 1 to 64 letters, digits, '_' and '-'.
func validInstanceID(id string) bool {
	return id != "" && len(id) <= 64 && sanitizeID(id) == id
}

// sanitizeID keeps the characters an instance id may have.
func sanitizeID(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '-':
			return r
		}
		return -1
	}, s)
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}
