-- Window over a window: per user TUMBLE 5 s, then per window TUMBLE 20 s over
-- the first's window_time (an event-time attribute).
CREATE TABLE events (
  user_id STRING,
  item INT,
  qty INT,
  price DECIMAL(10, 2),
  score DOUBLE,
  tag STRING,
  ts TIMESTAMP(3),
  WATERMARK FOR ts AS ts - INTERVAL '2' SECOND
) WITH (
  'connector' = 'filesystem',
  'path' = '${INPUT}/events.csv',
  'format' = 'csv',
  'csv.null-literal' = 'NULL',
  'scan.watermark.emit.strategy' = 'on-event'
);

CREATE TEMPORARY VIEW per_user AS
SELECT user_id, window_time AS wt, COUNT(*) AS cnt, SUM(qty) AS q
FROM TABLE(TUMBLE(TABLE events, DESCRIPTOR(ts), INTERVAL '5' SECOND))
GROUP BY window_start, window_end, window_time, user_id;

CREATE TABLE results (
  window_start TIMESTAMP(3),
  window_end TIMESTAMP(3),
  users BIGINT,
  rows_in BIGINT,
  q INT
) WITH (
  'connector' = 'filesystem',
  'path' = '${OUTPUT}',
  'format' = 'csv'
);

INSERT INTO results
SELECT window_start, window_end, COUNT(DISTINCT user_id), SUM(cnt), MAX(q)
FROM TABLE(TUMBLE(TABLE per_user, DESCRIPTOR(wt), INTERVAL '20' SECOND))
GROUP BY window_start, window_end;
