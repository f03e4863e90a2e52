// A load generator for profiling the coordinator: a DEALER that keeps a fixed number of echo REQUESTs
// (wire v2, docs/PROTOCOL.md §2.1) in flight, with as little client-side work as C allows, so that the
// coordinator's CPU per request can be compared between builds. Not part of the product.
//
//   drive ENDPOINT REQUESTS IN_FLIGHT      (SKILL and PARAMS from the environment; echo by default;
//                                           ECHOED=1 takes any message back as the answer; ROUNDS=1 sends
//                                           each request in a round of its own, which the bus remembers;
//                                           UNIQUE=1 gives each request a text of its own, a cache miss;
//                                           FANOUT=1 sends each as a ROUND fanning SKILL out to every agent;
//                                           INVOKE=1 sends each as a ROUND of one invocation, as skillbus send;
//                                           PLAN=1 as a ROUND of a plan of eight independent steps of SKILL;
//                                           FOLD=1 folds each message into one frame, as keyed clients do;
//                                           BATCH=1 also sends what a burst of answers makes it send as BATCH
//                                           frames, §2.2, the first one even alone, as keyed Skillbus clients do)
//
// Prints requests per second and, at one in flight, p50 and p99 round-trip times.
#define _GNU_SOURCE  // memmem
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

static double now_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

// Appends one short field (under 255 bytes) to an envelope.
static size_t put_field(unsigned char *envelope, size_t at, const char *text, size_t length) {
    envelope[at++] = (unsigned char)length;
    memcpy(envelope + at, text, length);
    return at + length;
}

// With FOLD=1 a message travels folded into one frame (§2.1: the body becomes the envelope's last field), as
// Skillbus's keyed clients send them; otherwise as the envelope, then the body as a frame of its own.
static int fold, batch;

// With BATCH=1: the folded messages waiting for the end of the burst (`flush_batch`), and whether a batch has
// gone yet (the first goes even alone: it tells the bus that this client reads batches).
enum { held_most = 256, batch_most = 30, batch_bytes = 4096 };
static unsigned char held[held_most][2400];
static size_t held_length[held_most];
static int held_count, announced;

static int send_message(void *socket, unsigned char *envelope, size_t at, const void *body, size_t length) {
    if (!fold && !batch) {
        if (zmq_send(socket, envelope, at, ZMQ_SNDMORE) < 0) return -1;
        return zmq_send(socket, body, length, 0) < 0 ? -1 : 0;
    }
    unsigned char frame[2400];
    if (at + 5 + length > sizeof frame) return -1;
    memcpy(frame, envelope, at);
    if (length < 255) {
        frame[at++] = (unsigned char)length;
    } else {
        frame[at++] = 0xFF;
        for (int shift = 24; shift >= 0; shift -= 8) frame[at++] = (unsigned char)(length >> shift);
    }
    memcpy(frame + at, body, length);
    if (batch && held_count < held_most) {
        memcpy(held[held_count], frame, at + length);
        held_length[held_count++] = at + length;
        return 0;
    }
    return zmq_send(socket, frame, at + length, 0) < 0 ? -1 : 0;
}

// Sends what `send_message` held: batches of at most 30 messages and 4096 bytes, a lone message as it is once
// a batch has gone.
static int flush_batch(void *socket) {
    static unsigned char frame[batch_bytes + 2400];
    int start = 0;
    while (start < held_count) {
        int end = start;
        size_t bytes = 11;
        while (end < held_count && end - start < batch_most && bytes + held_length[end] + 5 <= batch_bytes) {
            bytes += held_length[end] + 5;
            end++;
        }
        if (end == start || (end - start == 1 && announced)) {
            if (zmq_send(socket, held[start], held_length[start], 0) < 0) return -1;
            start++;
            continue;
        }
        size_t at = 0;
        memcpy(frame, "SKB2C\5BATCH", 11);
        at = 11;
        for (int index = start; index < end; index++) {
            size_t length = held_length[index];
            if (length < 255) {
                frame[at++] = (unsigned char)length;
            } else {
                frame[at++] = 0xFF;
                for (int shift = 24; shift >= 0; shift -= 8) frame[at++] = (unsigned char)(length >> shift);
            }
            memcpy(frame + at, held[index], length);
            at += length;
        }
        if (zmq_send(socket, frame, at, 0) < 0) return -1;
        announced = 1;
        start = end;
    }
    held_count = 0;
    return 0;
}

// A ROUND of `shape` ("fanout": to every agent that offers `skill`; "invoke": one invocation) of `skill`
// with `params`, in a round of its own. The body is canonical (keys sorted, §5.14's form), as Skillbus's
// clients write it: the bus reads such an invoke without parsing the whole body.
static int send_round(void *socket, long id, const char *shape, const char *skill, const char *params) {
    unsigned char envelope[300];
    char digits[24], round[40], body[2048];
    size_t at = 5;
    memcpy(envelope, "SKB2C", 5);
    at = put_field(envelope, at, "ROUND", 5);
    at = put_field(envelope, at, digits, (size_t)snprintf(digits, sizeof digits, "%ld", id));
    at = put_field(envelope, at, round, (size_t)snprintf(round, sizeof round, "drive-%ld-%ld", (long)getpid(), id));
    at = put_field(envelope, at, "", 0);  // session id
    at = put_field(envelope, at, "", 0);  // default timeout
    int length;
    if (strcmp(shape, "plan") == 0) {  // eight independent steps, each with its own text
        length = snprintf(body, sizeof body, "{\"plan\":{\"onFailure\":\"stop\",\"steps\":[");
        for (int step = 0; step < 8; step++)
            length += snprintf(body + length, sizeof body - (size_t)length,
                               "%s{\"after\":[],\"id\":\"s%d\",\"params\":{\"text\":\"t%d\"},\"skill\":\"%s\"}",
                               step ? "," : "", step, step, skill);
        length += snprintf(body + length, sizeof body - (size_t)length, "]}}");
    } else {
        length = snprintf(body, sizeof body, "{\"%s\":{\"params\":%s,\"skill\":\"%s\"}}", shape, params, skill);
    }
    return send_message(socket, envelope, at, body, (size_t)length);
}

static int send_request(void *socket, long id, const char *skill, const char *params, int rounds, int unique) {
    unsigned char envelope[300];
    char digits[24], round[40] = "";
    size_t at = 5;
    if (rounds == 2) return send_round(socket, id, "fanout", skill, params);
    if (rounds == 3) return send_round(socket, id, "invoke", skill, params);
    if (rounds == 4) return send_round(socket, id, "plan", skill, params);
    memcpy(envelope, "SKB2C", 5);
    at = put_field(envelope, at, "REQUEST", 7);
    at = put_field(envelope, at, digits, (size_t)snprintf(digits, sizeof digits, "%ld", id));
    if (rounds) snprintf(round, sizeof round, "drive-%ld-%ld", (long)getpid(), id);
    at = put_field(envelope, at, round, strlen(round));
    at = put_field(envelope, at, "", 0);  // session id
    at = put_field(envelope, at, skill, strlen(skill));
    at = put_field(envelope, at, "", 0);  // default timeout
    if (unique) {
        // As long as the bench's text (100 characters), with this request's number at its start.
        char text[300], filler[101];
        memset(filler, 'x', 100);
        int prefix = snprintf(filler, sizeof filler, "%ld-%ld-", (long)getpid(), id);
        filler[prefix] = 'x';
        filler[100] = 0;
        int length = snprintf(text, sizeof text, "{\"text\":\"%s\"}", filler);
        return send_message(socket, envelope, at, text, (size_t)length);
    }
    return send_message(socket, envelope, at, params, strlen(params));
}

// Whether a round document says ok: keys sorted, so the round's own status follows its shape.
static int round_ok(const void *data, size_t size) {
    static const char fanout[] = "\"shape\":\"fanout\",\"status\":\"ok\"";
    static const char invoke[] = "\"shape\":\"invoke\",\"status\":\"ok\"";
    static const char plan[] = "\"shape\":\"plan\",\"status\":\"ok\"";
    return memmem(data, size, fanout, sizeof fanout - 1) || memmem(data, size, invoke, sizeof invoke - 1)
           || memmem(data, size, plan, sizeof plan - 1);
}

// The request id in an answer's envelope: a REPLY's when it says ok (any message's when `echoed`), a ROUND's
// (`*round` set: its document, in a frame after the envelope or folded into it, says whether it succeeded); else -1.
static long envelope_id(const unsigned char *e, size_t size, int echoed, int *round) {
    size_t at = 5, field = 1;
    const unsigned char *fields[5];
    size_t lengths[5];
    char digits[24] = {0};
    while (at < size && field < 5) {  // fields 1..4: command, request id, round id, status
        size_t n = e[at++];
        if (n == 0xFF || at + n > size) break;
        fields[field] = e + at; lengths[field] = n; at += n; field++;
    }
    *round = field >= 4 && lengths[1] == 5 && !memcmp(fields[1], "ROUND", 5);
    if (!*round && !(field == 5 && (echoed || (lengths[1] == 5 && !memcmp(fields[1], "REPLY", 5) &&
                                               lengths[4] == 2 && !memcmp(fields[4], "ok", 2)))))
        return -1;
    memcpy(digits, fields[2], lengths[2] < 23 ? lengths[2] : 23);
    return strtol(digits, NULL, 10);
}

// The request id of one folded answer (one frame: every field in its envelope), or -1 as `receive_reply` says.
static long folded_reply_id(const unsigned char *e, size_t size, int echoed) {
    int round;
    long id = envelope_id(e, size, echoed, &round);
    return round && !round_ok(e, size) ? -1 : id;
}

// Reads one reply whole; returns its request id, or -1 for anything but an ok REPLY or a ROUND whose
// fan-out or invocation succeeded (any message, when `echoed`: the raw proxy's workers send the REQUEST itself back).
static long receive_reply(void *socket, int echoed) {
    zmq_msg_t part;
    long id = -1;
    int first = 1, more, round = 0;
    zmq_msg_init(&part);
    do {
        if (zmq_msg_recv(&part, socket, 0) < 0) { zmq_msg_close(&part); return -2; }
        if (round) {
            if (!round_ok(zmq_msg_data(&part), zmq_msg_size(&part))) id = -1;
            round = 0;
        } else if (first) {
            const unsigned char *e = zmq_msg_data(&part);
            size_t size = zmq_msg_size(&part);
            id = envelope_id(e, size, echoed, &round);
            if (round && !zmq_msg_more(&part)) {  // folded: the document is the envelope's last field
                if (!round_ok(e, size)) id = -1;
                round = 0;
            }
            first = 0;
        }
        more = zmq_msg_more(&part);
    } while (more);
    zmq_msg_close(&part);
    return id;
}

// The run's state: what was sent when, the round trips, and the counts.
static double *sent_at, *rtt;
static long total, sent, done, failed;

// One answer came (its request id, or -1 for a failed one): counts it and sends the next request, if any.
static void answered(void *socket, long id, const char *skill, const char *params, int rounds, int unique) {
    if (id >= 0 && id < total) rtt[done] = now_seconds() - sent_at[id]; else failed++;
    done++;
    if (sent < total) {
        sent_at[sent] = now_seconds();
        send_request(socket, sent, skill, params, rounds, unique);
        sent++;
    }
}

// With BATCH=1 every answer is one frame, folded, or a batch of them: reads what has come (waiting for the first),
// then sends what the answers made it send. Returns -1 when nothing came within the socket's timeout.
static int serve_batched(void *socket, int echoed, const char *skill, const char *params, int rounds, int unique) {
    zmq_msg_t message;
    zmq_msg_init(&message);
    int got = 0;
    while (done < total && zmq_msg_recv(&message, socket, got ? ZMQ_DONTWAIT : 0) >= 0) {
        got = 1;
        const unsigned char *e = zmq_msg_data(&message);
        size_t size = zmq_msg_size(&message);
        if (size < 11 || memcmp(e + 5, "\5BATCH", 6) != 0) {
            answered(socket, folded_reply_id(e, size, echoed), skill, params, rounds, unique);
            continue;
        }
        for (size_t at = 11; at < size;) {
            size_t n = e[at++];
            if (n == 0xFF) {
                if (at + 4 > size) break;
                n = (size_t)e[at] << 24 | (size_t)e[at + 1] << 16 | (size_t)e[at + 2] << 8 | e[at + 3];
                at += 4;
            }
            if (at + n > size) break;
            answered(socket, folded_reply_id(e + at, n, echoed), skill, params, rounds, unique);
            at += n;
        }
    }
    zmq_msg_close(&message);
    flush_batch(socket);
    return got ? 0 : -1;
}

int main(int argc, char **argv) {
    if (argc < 4) { fprintf(stderr, "usage: drive ENDPOINT REQUESTS IN_FLIGHT\n"); return 2; }
    total = atol(argv[2]);
    long in_flight = atol(argv[3]);
    const char *skill = getenv("SKILL") ? getenv("SKILL") : "echo";
    int echoed = getenv("ECHOED") != NULL, unique = getenv("UNIQUE") != NULL;
    fold = getenv("FOLD") != NULL;
    batch = getenv("BATCH") != NULL;
    int rounds = getenv("PLAN") != NULL     ? 4
                 : getenv("INVOKE") != NULL ? 3
                 : getenv("FANOUT") != NULL ? 2
                                            : getenv("ROUNDS") != NULL;
    const char *params = getenv("PARAMS") ? getenv("PARAMS") : "{\"text\":\"hello from the driver\"}";
    void *context = zmq_ctx_new(), *socket = zmq_socket(context, ZMQ_DEALER);
    int linger = 0, timeout_ms = 30000;
    zmq_setsockopt(socket, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt(socket, ZMQ_RCVTIMEO, &timeout_ms, sizeof timeout_ms);
    // CURVE when the coordinator has keys: its public key and this client's pair, Z85 (a key file's text).
    const char *server_key = getenv("CURVE_SERVER"), *public_key = getenv("CURVE_PUBLIC"),
               *secret_key = getenv("CURVE_SECRET");
    if (server_key && public_key && secret_key) {
        zmq_setsockopt(socket, ZMQ_CURVE_SERVERKEY, server_key, 40);
        zmq_setsockopt(socket, ZMQ_CURVE_PUBLICKEY, public_key, 40);
        zmq_setsockopt(socket, ZMQ_CURVE_SECRETKEY, secret_key, 40);
    }
    if (zmq_connect(socket, argv[1]) != 0) { perror("zmq_connect"); return 1; }
    sent_at = calloc((size_t)total, sizeof(double));
    rtt = calloc((size_t)total, sizeof(double));
    double started = now_seconds();
    for (; sent < in_flight && sent < total; sent++) {
        sent_at[sent] = now_seconds();
        send_request(socket, sent, skill, params, rounds, unique);
    }
    if (batch) flush_batch(socket);
    while (batch && done < total) {
        if (serve_batched(socket, echoed, skill, params, rounds, unique) < 0) {
            fprintf(stderr, "no reply within 30 s after %ld of %ld\n", done, total);
            return 1;
        }
    }
    while (done < total) {
        long id = receive_reply(socket, echoed);
        if (id == -2) { fprintf(stderr, "no reply within 30 s after %ld of %ld\n", done, total); return 1; }
        answered(socket, id, skill, params, rounds, unique);
    }
    double elapsed = now_seconds() - started;
    printf("requests %ld failed %ld seconds %.3f per_second %.0f", total, failed, elapsed, total / elapsed);
    if (in_flight == 1) {
        qsort(rtt, (size_t)done, sizeof(double), by_value);
        printf(" p50_ms %.3f p99_ms %.3f", rtt[done / 2] * 1e3, rtt[done * 99 / 100] * 1e3);
    }
    printf("\n");
    zmq_close(socket);
    zmq_ctx_term(context);
    return failed > 0;
}
