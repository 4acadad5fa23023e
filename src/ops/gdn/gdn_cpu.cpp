// CPU reference of the Gated DeltaNet core: causal conv1d with state, and the gated delta rule
// both token by token and in chunks (the two must agree; tests/ops checks that).
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/threading.h"
#include "ops/gdn/gdn.h"

namespace vt::cpu {

void causal_conv1d_silu(float* out, const float* x, float* state, const float* weight,
                        int64_t num_tokens, int64_t channels, int64_t kernel) {
  const int64_t history = kernel - 1;
  parallel_for(channels, 64, [&](int64_t begin, int64_t end) {
    std::vector<float> window(history + num_tokens);
    for (int64_t c = begin; c < end; ++c) {
      // window = [state (oldest first) | this step's inputs]
      for (int64_t j = 0; j < history; ++j) window[j] = state[c * history + j];
      for (int64_t t = 0; t < num_tokens; ++t) window[history + t] = x[t * channels + c];
      for (int64_t t = 0; t < num_tokens; ++t) {
        float sum = 0.0f;
        for (int64_t j = 0; j < kernel; ++j) sum += weight[c * kernel + j] * window[t + j];
        out[t * channels + c] = sum / (1.0f + std::exp(-sum));
      }
      for (int64_t j = 0; j < history; ++j) state[c * history + j] = window[num_tokens + j];
    }
  });
}

void gated_delta_rule_recurrent(float* out, const float* q, const float* k, const float* v,
                                const float* g, const float* beta, float* state, int64_t num_tokens,
                                int64_t num_k_heads, int64_t num_v_heads, int64_t dk, int64_t dv) {
  const int64_t ratio = num_v_heads / num_k_heads;
  parallel_for(num_v_heads, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> delta(dv);
    for (int64_t h = begin; h < end; ++h) {
      float* s = state + h * dk * dv;  // S[dk, dv]
      const int64_t key_head = h / ratio;
      for (int64_t t = 0; t < num_tokens; ++t) {
        const float* q_t = q + (t * num_k_heads + key_head) * dk;
        const float* k_t = k + (t * num_k_heads + key_head) * dk;
        const float* v_t = v + (t * num_v_heads + h) * dv;
        const float decay = std::exp(g[t * num_v_heads + h]);
        const float b = beta[t * num_v_heads + h];
        for (int64_t i = 0; i < dk * dv; ++i) s[i] *= decay;
        // delta = beta * (v - S^T k)
        for (int64_t j = 0; j < dv; ++j) delta[j] = 0.0f;
        for (int64_t i = 0; i < dk; ++i)
          for (int64_t j = 0; j < dv; ++j) delta[j] += s[i * dv + j] * k_t[i];
        for (int64_t j = 0; j < dv; ++j) delta[j] = (v_t[j] - delta[j]) * b;
        // S += k delta^T; o = S^T q
        for (int64_t i = 0; i < dk; ++i)
          for (int64_t j = 0; j < dv; ++j) s[i * dv + j] += k_t[i] * delta[j];
        float* o = out + (t * num_v_heads + h) * dv;
        for (int64_t j = 0; j < dv; ++j) o[j] = 0.0f;
        for (int64_t i = 0; i < dk; ++i)
          for (int64_t j = 0; j < dv; ++j) o[j] += s[i * dv + j] * q_t[i];
      }
    }
  });
}

// One chunk of L <= C tokens for one value head, in the UT-transform form:
//   A = I + strictly_lower((beta_i k_i . k_j) e^{c_i - c_j}),   c = cumsum(g) within the chunk
//   U = A^{-1} (beta v),  W = A^{-1} (beta k e^{c})
//   V' = U - W S;  O = (q e^{c}) S + tril((q_i . k_j) e^{c_i - c_j}) V'
//   S  = e^{c_L} S + (k e^{c_L - c})^T V'
void gated_delta_rule_chunked(float* out, const float* q, const float* k, const float* v,
                              const float* g, const float* beta, float* state, int64_t num_tokens,
                              int64_t num_k_heads, int64_t num_v_heads, int64_t dk, int64_t dv,
                              int64_t chunk_size) {
  const int64_t ratio = num_v_heads / num_k_heads;
  parallel_for(num_v_heads, 1, [&](int64_t begin, int64_t end) {
    const int64_t C = chunk_size;
    std::vector<float> cum(C), a(C * C), attn(C * C), u(C * dv), w(C * dk), v_new(C * dv), o_row(dv);
    for (int64_t h = begin; h < end; ++h) {
      float* s = state + h * dk * dv;
      const int64_t key_head = h / ratio;
      auto q_at = [&](int64_t t) { return q + (t * num_k_heads + key_head) * dk; };
      auto k_at = [&](int64_t t) { return k + (t * num_k_heads + key_head) * dk; };
      for (int64_t t0 = 0; t0 < num_tokens; t0 += C) {
        const int64_t L = std::min(C, num_tokens - t0);
        float running = 0.0f;
        for (int64_t i = 0; i < L; ++i) cum[i] = running += g[(t0 + i) * num_v_heads + h];
        for (int64_t i = 0; i < L; ++i) {
          const float b_i = beta[(t0 + i) * num_v_heads + h];
          for (int64_t j = 0; j < L; ++j) {
            float qk = 0.0f, kk = 0.0f;
            if (j <= i) {
              for (int64_t d = 0; d < dk; ++d) {
                qk += q_at(t0 + i)[d] * k_at(t0 + j)[d];
                kk += k_at(t0 + i)[d] * k_at(t0 + j)[d];
              }
            }
            const float decay = j <= i ? std::exp(cum[i] - cum[j]) : 0.0f;
            a[i * C + j] = j < i ? b_i * kk * decay : 0.0f;
            attn[i * C + j] = qk * decay;
          }
        }
        // Forward substitution with the unit lower-triangular A.
        for (int64_t i = 0; i < L; ++i) {
          const float b_i = beta[(t0 + i) * num_v_heads + h];
          const float* v_i = v + ((t0 + i) * num_v_heads + h) * dv;
          const float e_i = std::exp(cum[i]);
          for (int64_t j = 0; j < dv; ++j) u[i * dv + j] = b_i * v_i[j];
          for (int64_t d = 0; d < dk; ++d) w[i * dk + d] = b_i * k_at(t0 + i)[d] * e_i;
          for (int64_t j = 0; j < i; ++j) {
            const float coefficient = a[i * C + j];
            for (int64_t x = 0; x < dv; ++x) u[i * dv + x] -= coefficient * u[j * dv + x];
            for (int64_t d = 0; d < dk; ++d) w[i * dk + d] -= coefficient * w[j * dk + d];
          }
        }
        // V' = U - W S
        for (int64_t i = 0; i < L; ++i)
          for (int64_t x = 0; x < dv; ++x) {
            float ws = 0.0f;
            for (int64_t d = 0; d < dk; ++d) ws += w[i * dk + d] * s[d * dv + x];
            v_new[i * dv + x] = u[i * dv + x] - ws;
          }
        // O = (q e^c) S + attn V'
        for (int64_t i = 0; i < L; ++i) {
          const float e_i = std::exp(cum[i]);
          for (int64_t x = 0; x < dv; ++x) {
            float inter = 0.0f;
            for (int64_t d = 0; d < dk; ++d) inter += q_at(t0 + i)[d] * s[d * dv + x];
            float intra = 0.0f;
            for (int64_t j = 0; j <= i; ++j) intra += attn[i * C + j] * v_new[j * dv + x];
            o_row[x] = inter * e_i + intra;
          }
          std::copy(o_row.begin(), o_row.end(), out + ((t0 + i) * num_v_heads + h) * dv);
        }
        // S = e^{c_L} S + (k e^{c_L - c})^T V'
        const float chunk_decay = std::exp(cum[L - 1]);
        for (int64_t i = 0; i < dk * dv; ++i) s[i] *= chunk_decay;
        for (int64_t j = 0; j < L; ++j) {
          const float e = std::exp(cum[L - 1] - cum[j]);
          for (int64_t d = 0; d < dk; ++d) {
            const float kd = k_at(t0 + j)[d] * e;
            for (int64_t x = 0; x < dv; ++x) s[d * dv + x] += kd * v_new[j * dv + x];
          }
        }
      }
    }
  });
}

}  // namespace vt::cpu
