/* grpc-io.c — the pump between a non-blocking socket and an nghttp2 session,
 * shared by server and client connections. Never blocks: a write the socket
 * will not take now is kept and EPOLLOUT requested until it drains. */
#include "grpc-internal.h"

#include <errno.h>
#include <sys/socket.h>
#include <unistd.h>

/* Per call, read at most this much so one busy peer cannot starve the others. */
#define H2IO_READ_BUDGET (256u * 1024)

static int h2io_recv(struct grpc_h2io *io, const uint8_t *data, size_t len)
{
    ssize_t n = nghttp2_session_mem_recv(io->session, data, len);
    if (n < 0)
        return -EPROTO;
    return 0;
}

int grpc_h2io_feed(struct grpc_h2io *io, const uint8_t *data, size_t len)
{
    return h2io_recv(io, data, len);
}

int grpc_h2io_read(struct grpc_h2io *io)
{
    uint8_t buf[16384];
    size_t total = 0;
    while (total < H2IO_READ_BUDGET) {
        ssize_t n = recv(io->fd, buf, sizeof(buf), 0);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return 0;
            return -ECONNRESET;
        }
        if (n == 0)
            return -ECONNRESET;
        int r = h2io_recv(io, buf, (size_t)n);
        if (r < 0)
            return r;
        total += (size_t)n;
    }
    return 0;
}

static int h2io_want_out(struct grpc_h2io *io, bool want)
{
    if (io->fd < 0 || io->want_out == want)
        return 0;
    int r = ev_loop_mod_io(io->loop, io->fd, EPOLLIN | EPOLLRDHUP | (want ? EPOLLOUT : 0));
    if (r < 0)
        return r;
    io->want_out = want;
    return 0;
}

/* Writes from p; returns bytes written (maybe fewer) or -errno. */
static ssize_t h2io_write(struct grpc_h2io *io, const uint8_t *p, size_t len)
{
    if (io->fd < 0) {
        if (io->sink)
            io->sink(p, len, io->sink_data);
        return (ssize_t)len;
    }
    size_t done = 0;
    while (done < len) {
        ssize_t n = send(io->fd, p + done, len - done, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                break;
            return -errno;
        }
        done += (size_t)n;
    }
    return (ssize_t)done;
}

int grpc_h2io_flush(struct grpc_h2io *io)
{
    for (;;) {
        if (io->out.len > 0) {
            ssize_t n = h2io_write(io, grpc_buf_head(&io->out), io->out.len);
            if (n < 0)
                return (int)n;
            grpc_buf_consume(&io->out, (size_t)n);
            if (io->out.len > 0)
                return h2io_want_out(io, true);
        }
        const uint8_t *data;
        ssize_t n = nghttp2_session_mem_send(io->session, &data);
        if (n < 0)
            return -EPROTO;
        if (n == 0)
            break;
        ssize_t w = h2io_write(io, data, (size_t)n);
        if (w < 0)
            return (int)w;
        if (w < n) {
            /* nghttp2's buffer is only valid until the next mem_send: keep the rest. */
            int r = grpc_buf_append(&io->out, data + w, (size_t)(n - w));
            if (r < 0)
                return r;
        }
    }
    return h2io_want_out(io, false);
}

bool grpc_h2io_alive(const struct grpc_h2io *io)
{
    return io->out.len > 0 || nghttp2_session_want_read(io->session) ||
           nghttp2_session_want_write(io->session);
}
