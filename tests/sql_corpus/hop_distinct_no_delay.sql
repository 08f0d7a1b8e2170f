-- HOP (slide 2 s, size 6 s) over all rows: COUNT(DISTINCT), AVG of an INT,
-- HAVING; the watermark trails by 0 s, so many rows are late.
CREATE TABLE events (
  user_id STRING,
  item INT,
  qty INT,
  price DECIMAL(10, 2),
  score DOUBLE,
  tag STRING,
  ts TIMESTAMP(3),
  WATERMARK FOR ts AS ts
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
  users BIGINT,
  avg_qty INT,
  cnt BIGINT
) WITH (
  'connector' = 'filesystem',
  'path' = '${OUTPUT}',
  'format' = 'csv'
);

INSERT INTO results
SELECT window_start, window_end, COUNT(DISTINCT user_id), AVG(qty), COUNT(*)
FROM TABLE(HOP(TABLE events, DESCRIPTOR(ts), INTERVAL '2' SECOND, INTERVAL '6' SECOND))
GROUP BY window_start, window_end
HAVING COUNT(*) > 3;
