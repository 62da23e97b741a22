package dev.tarn.bench;

import com.fasterxml.jackson.databind.DeserializationFeature;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.ObjectReader;
import com.fasterxml.jackson.databind.ObjectWriter;
import java.io.IOException;
import org.apache.kafka.common.errors.SerializationException;
import org.apache.kafka.common.serialization.Deserializer;
import org.apache.kafka.common.serialization.Serde;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.serialization.Serializer;

/** JSON values through Jackson, with a reader and writer bound to one class (the fast path). */
final class JsonSerde {
    private JsonSerde() {}

    private static final ObjectMapper MAPPER =
        new ObjectMapper().configure(DeserializationFeature.FAIL_ON_UNKNOWN_PROPERTIES, false);

    static <T> Serde<T> of(Class<T> type) {
        ObjectReader reader = MAPPER.readerFor(type);
        ObjectWriter writer = MAPPER.writerFor(type);
        Serializer<T> ser = (topic, v) -> {
            if (v == null) {
                return null;
            }
            try {
                return writer.writeValueAsBytes(v);
            } catch (IOException e) {
                throw new SerializationException("encode " + type.getSimpleName() + " for " + topic, e);
            }
        };
        Deserializer<T> de = (topic, b) -> {
            if (b == null) {
                return null;
            }
            try {
                return reader.readValue(b);
            } catch (IOException e) {
                throw new SerializationException("decode " + type.getSimpleName() + " from " + topic, e);
            }
        };
        return Serdes.serdeFrom(ser, de);
    }
}
