-- TUMBLE over all rows (no key): DOUBLE SUM, AVG, MIN, MAX and COUNT, written
-- as Java's Double.toString writes them.
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
  n BIGINT,
  total DOUBLE,
  mean DOUBLE,
  lo DOUBLE,
  hi DOUBLE
) WITH (
  'connector' = 'filesystem',
  'path' = '${OUTPUT}',
  'format' = 'csv'
);

INSERT INTO results
SELECT window_start, window_end, COUNT(score), SUM(score), AVG(score), MIN(score), MAX(score)
FROM TABLE(TUMBLE(TABLE events, DESCRIPTOR(ts), INTERVAL '15' SECOND))
GROUP BY window_start, window_end;
