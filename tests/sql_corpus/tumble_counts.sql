-- TUMBLE: counts, sums, minimum, maximum and average of an INT column with
-- NULLs, per user; late rows (beyond the 2 s watermark delay) dropped.
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

CREATE TABLE results (
  window_start TIMESTAMP(3),
  window_end TIMESTAMP(3),
  user_id STRING,
  cnt BIGINT,
  cnt_qty BIGINT,
  sum_qty INT,
  min_qty INT,
  max_qty INT,
  avg_qty INT
) WITH (
  'connector' = 'filesystem',
  'path' = '${OUTPUT}',
  'format' = 'csv'
);

INSERT INTO results
SELECT window_start, window_end, user_id,
  COUNT(*), COUNT(qty), SUM(qty), MIN(qty), MAX(qty), AVG(qty)
FROM TABLE(TUMBLE(TABLE events, DESCRIPTOR(ts), INTERVAL '10' SECOND))
GROUP BY window_start, window_end, user_id;
