-- DATE_FORMAT of a TIMESTAMP_LTZ event time (in UTC) and of a window's
-- bounds.
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
  window_label STRING,
  last_order STRING,
  orders BIGINT
) WITH (
  'connector' = 'filesystem',
  'path' = '${OUTPUT}',
  'format' = 'csv'
);

INSERT INTO results
SELECT user_id,
  DATE_FORMAT(window_start, 'HH:mm') || '-' || DATE_FORMAT(window_end, 'HH:mm:ss'),
  DATE_FORMAT(MAX(ts), 'yyyy-MM-dd HH:mm:ss.SSS EEE'),
  COUNT(*)
FROM TABLE(TUMBLE(TABLE orders, DESCRIPTOR(ts), INTERVAL '30' SECOND))
GROUP BY user_id, window_start, window_end;
