-- The windowed aggregation of benches/sql_window/compare.sh, the same text on
-- floe (`floe sql -f`) and Flink (flink_sql.py): per key and 1 s tumbling
-- window, SUM and COUNT over `key,timestamp_ms,value` lines.
CREATE TABLE events (
  k STRING,
  ts_ms BIGINT,
  v INT,
  ts AS TO_TIMESTAMP_LTZ(ts_ms, 3),
  WATERMARK FOR ts AS ts - INTERVAL '1' SECOND
) WITH (
  'connector' = 'filesystem',
  'path' = '${INPUT}',
  'format' = 'csv'
);

CREATE TABLE sums (
  k STRING,
  window_start TIMESTAMP(3),
  window_end TIMESTAMP(3),
  total INT,
  cnt BIGINT
) WITH (
  'connector' = 'filesystem',
  'path' = '${OUTPUT}',
  'format' = 'csv'
);

INSERT INTO sums
SELECT k, window_start, window_end, SUM(v), COUNT(*)
FROM TABLE(TUMBLE(TABLE events, DESCRIPTOR(ts), INTERVAL '1' SECOND))
GROUP BY window_start, window_end, k;
