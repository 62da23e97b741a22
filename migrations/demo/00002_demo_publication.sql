-- The publication the demo's CDC source reads (it would create it itself, but a role that
-- does not own the tables cannot), and read access for tarn_reader.

-- +goose Up
CREATE PUBLICATION tarn_demo FOR TABLE customers, users, orders;
GRANT SELECT ON customers, users, orders TO tarn_reader;

-- +goose Down
REVOKE SELECT ON customers, users, orders FROM tarn_reader;
DROP PUBLICATION IF EXISTS tarn_demo;
