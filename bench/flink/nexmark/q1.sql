-- q1, currency conversion: {auction, bidder, price, date_time}, the price x 0.908 as a DOUBLE
-- (the engine's is a Python float; Flink's 0.908 * price would be a DECIMAL).
CREATE TABLE sink (auction BIGINT, bidder BIGINT, price DOUBLE, date_time BIGINT)
WITH (${append_sink});

INSERT INTO sink
SELECT auction, bidder, 0.908 * CAST(price AS DOUBLE), date_time FROM bid;
