-- WHERE before and HAVING after an updating GROUP BY: a group leaves the
-- table when its result stops satisfying HAVING (a delete of its key).
-- postgres: CREATE TABLE ${TABLE} (user_id text, tag text, qty_sum integer, n bigint, PRIMARY KEY (user_id, tag))
CREATE TABLE events (
  user_id STRING,
  item INT,
  qty INT,
  price DECIMAL(10, 2),
  score DOUBLE,
  tag STRING,
  ts TIMESTAMP(3)
) WITH (
  'connector' = 'filesystem',
  'path' = '${INPUT}/events.csv',
  'format' = 'csv',
  'csv.null-literal' = 'NULL'
);

CREATE TABLE results (
  user_id STRING,
  tag STRING,
  qty_sum INT,
  n BIGINT,
  PRIMARY KEY (user_id, tag) NOT ENFORCED
) WITH (
  'connector' = 'jdbc',
  'url' = '${JDBC_URL}',
  'table-name' = '${TABLE}',
  'username' = 'floe',
  'password' = 'floe'
);

INSERT INTO results
SELECT user_id, tag, SUM(qty), COUNT(*)
FROM events
WHERE tag IS NOT NULL AND qty > -40
GROUP BY user_id, tag
HAVING SUM(qty) BETWEEN 0 AND 1500;
