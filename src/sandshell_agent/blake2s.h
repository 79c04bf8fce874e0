/* BLAKE2s (RFC 7693), keyed, 16-byte tags as hex: what bashloop.c signs its records with and checks
   the agent's frames by (Python's hashlib.blake2s(data, key=..., digest_size=16) is the same). */

#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef struct {
  uint32_t h[8], t[2];
  uint8_t b[64];
  size_t c;
} blake2s;

static const uint32_t IV[8] = {0x6A09E667, 0xBB67AE85, 0x3C6EF372, 0xA54FF53A,
                               0x510E527F, 0x9B05688C, 0x1F83D9AB, 0x5BE0CD19};
static const uint8_t SIGMA[10][16] = {
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}, {14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3},
    {11, 8, 12, 0, 5, 2, 15, 13, 10, 14, 3, 6, 7, 1, 9, 4}, {7, 9, 3, 1, 13, 12, 11, 14, 2, 6, 5, 10, 4, 0, 15, 8},
    {9, 0, 5, 7, 2, 4, 10, 15, 14, 1, 11, 12, 6, 8, 3, 13}, {2, 12, 6, 10, 0, 11, 8, 3, 4, 13, 7, 5, 15, 14, 1, 9},
    {12, 5, 1, 15, 14, 13, 4, 10, 0, 7, 6, 3, 9, 2, 8, 11}, {13, 11, 7, 14, 12, 1, 3, 9, 5, 0, 15, 4, 8, 6, 2, 10},
    {6, 15, 14, 9, 11, 3, 0, 8, 12, 2, 13, 7, 1, 4, 10, 5}, {10, 2, 8, 4, 7, 6, 1, 5, 15, 11, 9, 14, 3, 12, 13, 0}};

#define ROTR(x, n) (((x) >> (n)) | ((x) << (32 - (n))))
#define G(a, b, c, d, x, y)                                                                                            \
  do {                                                                                                                 \
    v[a] += v[b] + (x), v[d] = ROTR(v[d] ^ v[a], 16), v[c] += v[d], v[b] = ROTR(v[b] ^ v[c], 12);                     \
    v[a] += v[b] + (y), v[d] = ROTR(v[d] ^ v[a], 8), v[c] += v[d], v[b] = ROTR(v[b] ^ v[c], 7);                       \
  } while (0)

static void compress(blake2s *s, int last) {
  uint32_t v[16], m[16];
  for (int i = 0; i < 8; i++)
    v[i] = s->h[i], v[i + 8] = IV[i];
  v[12] ^= s->t[0], v[13] ^= s->t[1];
  if (last)
    v[14] = ~v[14];
  for (int i = 0; i < 16; i++)
    m[i] = (uint32_t)s->b[4 * i] | (uint32_t)s->b[4 * i + 1] << 8 | (uint32_t)s->b[4 * i + 2] << 16 |
           (uint32_t)s->b[4 * i + 3] << 24;
  for (int r = 0; r < 10; r++) {
    const uint8_t *z = SIGMA[r];
    G(0, 4, 8, 12, m[z[0]], m[z[1]]);
    G(1, 5, 9, 13, m[z[2]], m[z[3]]);
    G(2, 6, 10, 14, m[z[4]], m[z[5]]);
    G(3, 7, 11, 15, m[z[6]], m[z[7]]);
    G(0, 5, 10, 15, m[z[8]], m[z[9]]);
    G(1, 6, 11, 12, m[z[10]], m[z[11]]);
    G(2, 7, 8, 13, m[z[12]], m[z[13]]);
    G(3, 4, 9, 14, m[z[14]], m[z[15]]);
  }
  for (int i = 0; i < 8; i++)
    s->h[i] ^= v[i] ^ v[i + 8];
}

static void update(blake2s *s, const void *data, size_t n) {
  const uint8_t *p = data;
  for (size_t i = 0; i < n; i++) {
    if (s->c == 64) {
      s->t[0] += 64;
      if (s->t[0] < 64)
        s->t[1]++;
      compress(s, 0);
      s->c = 0;
    }
    s->b[s->c++] = p[i];
  }
}

#define TAG 16
static uint8_t key[32];

/* The tag of `data` under `key`, as 2 * TAG hex digits and a NUL, into `hex`. */
static void tag(const char *data, size_t n, char *hex) {
  blake2s s = {.c = 0};
  memcpy(s.h, IV, sizeof IV);
  s.h[0] ^= 0x01010000 ^ (uint32_t)sizeof key << 8 ^ TAG;
  update(&s, key, sizeof key);
  memset(s.b + s.c, 0, 64 - s.c); /* the key fills a block of its own */
  s.c = 64;
  update(&s, data, n);
  s.t[0] += (uint32_t)s.c;
  if (s.t[0] < s.c)
    s.t[1]++;
  memset(s.b + s.c, 0, 64 - s.c);
  compress(&s, 1);
  for (int i = 0; i < TAG; i++)
    hex[2 * i] = "0123456789abcdef"[(s.h[i / 4] >> (8 * (i % 4)) >> 4) & 15],
            hex[2 * i + 1] = "0123456789abcdef"[(s.h[i / 4] >> (8 * (i % 4))) & 15];
  hex[2 * TAG] = '\0';
}

