-- What tarn itself needs in a database it replicates: a schema for its own objects and a
-- role that holds read access to published tables. Replication itself needs a login role with
-- the REPLICATION attribute, which is not inherited through membership, so it is granted to
-- the login role directly (ALTER ROLE ... REPLICATION) and is not part of these migrations.

-- +goose Up
CREATE SCHEMA IF NOT EXISTS tarn;
COMMENT ON SCHEMA tarn IS 'objects owned by tarn (materialized views from CDC and Kafka)';

-- Roles are cluster-wide, so another database may have created it already.
-- +goose StatementBegin
DO $$
BEGIN
    CREATE ROLE tarn_reader NOLOGIN;
EXCEPTION WHEN duplicate_object THEN
    NULL;
END
$$;
-- +goose StatementEnd
GRANT USAGE ON SCHEMA public TO tarn_reader;
ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT ON TABLES TO tarn_reader;

-- +goose Down
-- The role is left in place: other databases of the cluster may use it.
ALTER DEFAULT PRIVILEGES IN SCHEMA public REVOKE SELECT ON TABLES FROM tarn_reader;
REVOKE USAGE ON SCHEMA public FROM tarn_reader;
DROP SCHEMA IF EXISTS tarn;
