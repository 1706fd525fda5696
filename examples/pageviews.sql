-- The table of examples/pageviews.py (run once):
--   psql -h 127.0.0.1 -U postgres -d test -f examples/pageviews.sql
-- page_views: views of each page in each minute of event time (an upsert on both).
CREATE TABLE IF NOT EXISTS page_views (
  minute bigint NOT NULL,  -- the window's start, ms since the epoch
  page text NOT NULL,
  views bigint NOT NULL,
  PRIMARY KEY (minute, page)
);
