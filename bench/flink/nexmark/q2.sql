-- q2, selection: {auction, price} of the bids on auctions whose id is a multiple of 123.
CREATE TABLE sink (auction BIGINT, price BIGINT) WITH (${append_sink});

INSERT INTO sink
SELECT auction, price FROM bid WHERE MOD(auction, 123) = 0;
