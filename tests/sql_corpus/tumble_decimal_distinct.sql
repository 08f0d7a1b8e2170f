-- TUMBLE: decimal SUM, AVG, MIN and MAX, and COUNT(DISTINCT) of an INT and
-- of a STRING, per user.
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
  sum_price DECIMAL(38, 2),
  avg_price DECIMAL(38, 6),
  min_price DECIMAL(10, 2),
  max_price DECIMAL(10, 2),
  items BIGINT,
  tags BIGINT
) WITH (
  'connector' = 'filesystem',
  'path' = '${OUTPUT}',
  'format' = 'csv'
);

INSERT INTO results
SELECT window_start, window_end, user_id, SUM(price), AVG(price), MIN(price),
  MAX(price), COUNT(DISTINCT item), COUNT(DISTINCT tag)
FROM TABLE(TUMBLE(TABLE events, DESCRIPTOR(ts), INTERVAL '10' SECOND))
GROUP BY window_start, window_end, user_id;
