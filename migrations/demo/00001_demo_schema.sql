-- The demo schema: users (to enrich ad clicks, which arrive on a Kafka topic keyed by user
-- id), and customers with a region plus their orders (for "orders per customer region").
-- Every table has a primary key, as CDC keys records by it.

-- +goose Up
CREATE TABLE customers (
    id         bigint PRIMARY KEY,
    name       text NOT NULL,
    region     text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE users (
    id         bigint PRIMARY KEY,
    name       text NOT NULL,
    email      text NOT NULL UNIQUE,
    country    text NOT NULL,
    segment    text NOT NULL DEFAULT 'standard',
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE orders (
    id          bigint PRIMARY KEY,
    customer_id bigint NOT NULL REFERENCES customers (id),
    amount      numeric(12, 2) NOT NULL CHECK (amount >= 0),
    status      text NOT NULL DEFAULT 'placed' CHECK (status IN ('placed', 'paid', 'shipped', 'cancelled')),
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX orders_customer_id ON orders (customer_id);

-- +goose Down
DROP TABLE orders;
DROP TABLE users;
DROP TABLE customers;
