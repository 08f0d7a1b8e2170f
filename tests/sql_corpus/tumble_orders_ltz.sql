-- TUMBLE (5 s) over a TIMESTAMP_LTZ event time, in UTC: window_time, decimal
-- SUM and AVG, MIN and MAX of a BIGINT.
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
  window_start TIMESTAMP(3),
  window_end TIMESTAMP(3),
  window_time TIMESTAMP_LTZ(3),
  cnt BIGINT,
  total DECIMAL(38, 3),
  mean DECIMAL(38, 6),
  first_id BIGINT,
  last_id BIGINT
) WITH (
  'connector' = 'filesystem',
  'path' = '${OUTPUT}',
  'format' = 'csv'
);

INSERT INTO results
SELECT window_start, window_end, window_time, COUNT(*), SUM(amount), AVG(amount),
  MIN(order_id), MAX(order_id)
FROM TABLE(TUMBLE(TABLE orders, DESCRIPTOR(ts), INTERVAL '5' SECOND))
GROUP BY window_start, window_end, window_time;
