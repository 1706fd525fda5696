-- The tables of examples/stream_to_postgres.py (run once):
--   psql -h 127.0.0.1 -U postgres -d test -f examples/stream_to_postgres.sql
-- word_updates: every (word, count) the count emitted, appended once each.
CREATE TABLE IF NOT EXISTS word_updates (word text NOT NULL, count bigint NOT NULL);
-- word_totals: the last count of each word (an upsert on word).
CREATE TABLE IF NOT EXISTS word_totals (word text PRIMARY KEY, count bigint NOT NULL);
