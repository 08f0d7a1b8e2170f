-- SESSION per user (gap 3 s) over a TIMESTAMP_LTZ event time computed from epoch
-- milliseconds; window_time is a TIMESTAMP_LTZ(3).
CREATE TABLE orders (
  order_id BIGINT,
  user_id STRING,
  amount DECIMAL(12, 3),
  epoch_ms BIGINT,
  ts AS TO_TIMESTAMP_LTZ(epoch_ms, 3),
  WATERMARK FOR ts AS ts - INTERVAL '1' SECOND
) WITH (
  'connector' = 'filesystem',
  'path' = '${INPUT}/orders.csv',
  'format' = 'csv',
  'scan.watermark.emit.strategy' = 'on-event'
);

CREATE TABLE results (
  user_id STRING,
  window_start TIMESTAMP(3),
  window_end TIMESTAMP(3),
  window_time TIMESTAMP_LTZ(3),
  cnt BIGINT,
  total DECIMAL(38, 3)
) WITH (
  'connector' = 'filesystem',
  'path' = '${OUTPUT}',
  'format' = 'csv'
);

INSERT INTO results
SELECT user_id, window_start, window_end, window_time, COUNT(*), SUM(amount)
FROM TABLE(SESSION(TABLE orders PARTITION BY user_id, DESCRIPTOR(ts), INTERVAL '3' SECOND))
GROUP BY window_start, window_end, window_time, user_id;
