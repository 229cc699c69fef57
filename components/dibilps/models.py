"""Networks: VAE with a continuous decoder, point-set condition encoder, conv UNet denoiser,
masked-input regressor. Small stand-ins for the paper's AutoencoderKL + GINO decoder,
CLIP-ViT + GINO encoder and SD UNet (same roles and interfaces, CPU sizes)."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


def grid_coords(n: int, device=None) -> torch.Tensor:
    """(n*n, 2) node coordinates in [0, 1]^2, row-major over [i, j] = (x_i, y_j)."""
    x = torch.linspace(0.0, 1.0, n, device=device)
    gx, gy = torch.meshgrid(x, x, indexing="ij")
    return torch.stack([gx.ravel(), gy.ravel()], dim=1)


def fourier_features(coords: torch.Tensor, n_freqs: int) -> torch.Tensor:
    """[x, y, sin(pi f x), cos(pi f x), ...] for f = 1..n_freqs."""
    f = torch.arange(1, n_freqs + 1, dtype=coords.dtype, device=coords.device) * math.pi
    ang = coords.unsqueeze(-1) * f                       # (..., 2, F)
    return torch.cat([coords, torch.sin(ang).flatten(-2), torch.cos(ang).flatten(-2)], dim=-1)


def _norm(ch: int) -> nn.GroupNorm:
    return nn.GroupNorm(min(8, ch), ch)


class ResBlock(nn.Module):
    def __init__(self, c_in: int, c_out: int, emb_dim: int = 0):
        super().__init__()
        self.n1, self.c1 = _norm(c_in), nn.Conv2d(c_in, c_out, 3, padding=1)
        self.n2, self.c2 = _norm(c_out), nn.Conv2d(c_out, c_out, 3, padding=1)
        self.emb = nn.Linear(emb_dim, c_out) if emb_dim else None
        self.skip = nn.Conv2d(c_in, c_out, 1) if c_in != c_out else nn.Identity()

    def forward(self, x, emb=None):
        h = self.c1(F.silu(self.n1(x)))
        if self.emb is not None:
            h = h + self.emb(emb)[:, :, None, None]
        h = self.c2(F.silu(self.n2(h)))
        return h + self.skip(x)


# ----------------------------------------------------------------------------- VAE
class ContinuousDecoding:
    """What every field VAE shares: a feature map from the latent (``features``), sampled
    bilinearly at any coordinates and read out by a coordinate MLP (``head``), so the output
    resolution is free ("GINO-lite"), plus the VAE loss. Needs ``res``, ``down``,
    ``fourier_freqs``, ``latent_channels``, ``head``, ``encode`` and ``features``."""

    @staticmethod
    def coordinate_head(feature_channels: int, fourier_freqs: int) -> nn.Sequential:
        d_in = feature_channels + 2 + 4 * fourier_freqs
        return nn.Sequential(nn.Linear(d_in, 64), nn.SiLU(), nn.Linear(64, 64), nn.SiLU(),
                             nn.Linear(64, 2))

    def latent_size(self, n: int) -> int:
        """Side of the latent of an n x n field (fields are padded to a multiple of 2^down)."""
        f = 2 ** self.down
        return (n + (-n) % f) // f

    def _pad(self, x):
        pad = (-x.shape[-1]) % (2 ** self.down)
        return F.pad(x, (0, pad, 0, pad), mode="replicate") if pad else x

    def query(self, z: torch.Tensor, coords: torch.Tensor) -> torch.Tensor:
        """Decode at coordinates (P, 2) in [0, 1]^2 -> (B, P, 2) normalised (u, a)."""
        feat = self.features(z)                               # (B, Cf, m, m), node-aligned
        m = feat.shape[-1]
        # feature pixel k sits at x = k / (res - 1) (padded nodes lie beyond 1): map to [-1, 1]
        scale = (self.res - 1) / (m - 1)
        g = (coords * scale) * 2 - 1                          # (P, 2) as (x -> H axis, y -> W)
        grid = torch.stack([g[:, 1], g[:, 0]], dim=-1)        # grid_sample wants (W, H) order
        grid = grid.view(1, 1, -1, 2).expand(z.shape[0], -1, -1, -1)
        sampled = F.grid_sample(feat, grid, mode="bilinear", align_corners=True)  # (B, Cf, 1, P)
        sampled = sampled[:, :, 0].transpose(1, 2)            # (B, P, Cf)
        ff = fourier_features(coords, self.fourier_freqs).expand(z.shape[0], -1, -1)
        return self.head(torch.cat([sampled, ff], dim=-1))

    def decode(self, z: torch.Tensor, n: int | None = None) -> torch.Tensor:
        """Decode on the n x n node grid -> (B, 2, n, n)."""
        n = n or self.res
        out = self.query(z, grid_coords(n, z.device))
        return out.transpose(1, 2).reshape(z.shape[0], 2, n, n)

    def forward(self, x: torch.Tensor, kl_weight: float = 1e-6) -> torch.Tensor:
        mean, logvar = self.encode(x)
        z = mean + torch.exp(0.5 * logvar) * torch.randn_like(mean)
        recon = self.decode(z, x.shape[-1])
        kl = 0.5 * (mean**2 + logvar.exp() - 1 - logvar).sum(dim=(1, 2, 3)).mean()
        return F.mse_loss(recon, x) + kl_weight * kl


class FieldVAE(ContinuousDecoding, nn.Module):
    """Conv encoder (2, n, n) -> latent (C, n/4, n/4) (mean, log-variance); decoder = conv trunk
    to a feature map + the coordinate MLP of ``ContinuousDecoding``."""

    def __init__(self, latent_channels: int = 4, width: int = 32, feature_channels: int = 32,
                 fourier_freqs: int = 4, res: int = 32, down: int = 2):
        super().__init__()
        self.res, self.fourier_freqs, self.down = res, fourier_freqs, down
        # widths w, 2w, 4w, 4w... at n, n/2, n/4, ...: one conv at full resolution keeps CPU cost low
        widths = [width * min(2 ** i, 4) for i in range(down + 1)]
        enc: list[nn.Module] = [nn.Conv2d(2, widths[0], 3, padding=1), nn.SiLU()]
        for i in range(down):
            enc += [nn.Conv2d(widths[i], widths[i + 1], 3, stride=2, padding=1),
                    ResBlock(widths[i + 1], widths[i + 1])]
        enc += [_norm(widths[-1]), nn.SiLU(), nn.Conv2d(widths[-1], 2 * latent_channels, 3, padding=1)]
        self.enc = nn.Sequential(*enc)
        dec: list[nn.Module] = [nn.Conv2d(latent_channels, widths[-1], 3, padding=1),
                                ResBlock(widths[-1], widths[-1])]
        for i in reversed(range(1, down)):
            dec += [nn.Upsample(scale_factor=2, mode="nearest"),
                    nn.Conv2d(widths[i + 1], widths[i], 3, padding=1), ResBlock(widths[i], widths[i])]
        dec += [nn.Upsample(scale_factor=2, mode="nearest"),
                nn.Conv2d(widths[1], feature_channels, 3, padding=1)]
        self.dec = nn.Sequential(*dec)
        self.head = self.coordinate_head(feature_channels, fourier_freqs)
        self.latent_channels = latent_channels

    def encode(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x (B, 2, n, n) -> mean, logvar (B, C, n/2^down, n/2^down); fields are padded
        (replicate) from n to the next multiple of 2^down first."""
        x = self._pad(x)
        mean, logvar = self.enc(x).chunk(2, dim=1)
        return mean, logvar.clamp(-20, 10)

    def features(self, z: torch.Tensor) -> torch.Tensor:
        return self.dec(z)


# ----------------------------------------------------------------------------- condition encoder
class PointSetTower(nn.Module):
    """Transformer over observed points: token = Fourier(x, y) + value embedding."""

    def __init__(self, d_model: int = 64, n_layers: int = 2, n_heads: int = 4, fourier_freqs: int = 4):
        super().__init__()
        self.fourier_freqs = fourier_freqs
        self.inp = nn.Linear(2 + 4 * fourier_freqs + 1, d_model)
        layer = nn.TransformerEncoderLayer(d_model, n_heads, 2 * d_model, dropout=0.0,
                                           batch_first=True, norm_first=True)
        self.body = nn.TransformerEncoder(layer, n_layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d_model)

    def forward(self, coords: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        """coords (B, P, 2), values (B, P) -> tokens (B, P, d)."""
        tok = self.inp(torch.cat([fourier_features(coords, self.fourier_freqs),
                                  values.unsqueeze(-1)], dim=-1))
        return self.norm(self.body(tok))


class CondEncoder(nn.Module):
    """Two towers (sparse u, sparse a) aligned by a symmetric InfoNCE on pooled embeddings."""

    def __init__(self, d_model: int = 64, n_layers: int = 2, n_heads: int = 4, embed_dim: int = 64,
                 temperature_init: float = 0.07):
        super().__init__()
        self.tower_u = PointSetTower(d_model, n_layers, n_heads)
        self.tower_a = PointSetTower(d_model, n_layers, n_heads)
        self.proj_u = nn.Linear(d_model, embed_dim, bias=False)
        self.proj_a = nn.Linear(d_model, embed_dim, bias=False)
        self.logit_scale = nn.Parameter(torch.tensor(math.log(1 / temperature_init)))
        self.d_model = d_model

    def tokens(self, field: str, coords, values) -> torch.Tensor:
        return (self.tower_u if field == "u" else self.tower_a)(coords, values)

    def embed(self, field: str, coords, values) -> torch.Tensor:
        proj = self.proj_u if field == "u" else self.proj_a
        return F.normalize(proj(self.tokens(field, coords, values).mean(dim=1)), dim=-1)

    def info_nce(self, coords, u_vals, a_vals) -> tuple[torch.Tensor, torch.Tensor]:
        eu, ea = self.embed("u", coords, u_vals), self.embed("a", coords, a_vals)
        logits = self.logit_scale.exp().clamp(max=100) * eu @ ea.T
        target = torch.arange(len(eu), device=eu.device)
        loss = (F.cross_entropy(logits, target) + F.cross_entropy(logits.T, target)) / 2
        acc = (logits.argmax(dim=1) == target).float().mean()
        return loss, acc


# ----------------------------------------------------------------------------- denoiser
def timestep_embedding(t: torch.Tensor, dim: int) -> torch.Tensor:
    half = dim // 2
    freqs = torch.exp(-math.log(10_000) * torch.arange(half, device=t.device) / half)
    args = t.float().view(-1, 1) * freqs.view(1, -1)
    return torch.cat([torch.sin(args), torch.cos(args)], dim=1)


class CrossAttention(nn.Module):
    def __init__(self, ch: int, d_cond: int, n_heads: int = 4):
        super().__init__()
        self.norm = _norm(ch)
        self.attn = nn.MultiheadAttention(ch, n_heads, kdim=d_cond, vdim=d_cond, batch_first=True)

    def forward(self, x, cond):
        b, c, h, w = x.shape
        q = self.norm(x).flatten(2).transpose(1, 2)
        out, _ = self.attn(q, cond, cond, need_weights=False)
        return x + out.transpose(1, 2).reshape(b, c, h, w)


class UNet(nn.Module):
    """ε-prediction conv UNet with ``levels`` downsamplings; with ``d_cond`` every block also
    cross-attends to condition tokens (observation tokens + the direction token), and the mean
    token is added to the timestep embedding (SD-XL-style pooled conditioning)."""

    def __init__(self, in_ch: int, ch: int = 48, levels: int = 2, d_cond: int = 0,
                 out_ch: int | None = None):
        super().__init__()
        emb = 4 * ch
        self.ch = ch
        self.t_mlp = nn.Sequential(nn.Linear(ch, emb), nn.SiLU(), nn.Linear(emb, emb))
        self.inp = nn.Conv2d(in_ch, ch, 3, padding=1)
        widths = [ch * min(2 ** i, 2) for i in range(levels + 1)]
        self.down, self.downsample, self.attn_down = nn.ModuleList(), nn.ModuleList(), nn.ModuleList()
        for i in range(levels):
            self.down.append(ResBlock(widths[i], widths[i + 1], emb))
            self.attn_down.append(CrossAttention(widths[i + 1], d_cond) if d_cond else nn.Identity())
            self.downsample.append(nn.Conv2d(widths[i + 1], widths[i + 1], 3, stride=2, padding=1))
        self.mid = ResBlock(widths[-1], widths[-1], emb)
        self.attn_mid = CrossAttention(widths[-1], d_cond) if d_cond else nn.Identity()
        self.up, self.attn_up = nn.ModuleList(), nn.ModuleList()
        for i in reversed(range(levels)):
            self.up.append(ResBlock(2 * widths[i + 1], widths[i], emb))
            self.attn_up.append(CrossAttention(widths[i], d_cond) if d_cond else nn.Identity())
        self.out = nn.Sequential(_norm(ch), nn.SiLU(), nn.Conv2d(ch, out_ch or in_ch, 3, padding=1))
        self.d_cond = d_cond
        self.pooled = nn.Linear(d_cond, emb) if d_cond else None

    def _attn(self, block, h, cond):
        return block(h, cond) if self.d_cond else h

    def forward(self, x: torch.Tensor, t: torch.Tensor, cond: torch.Tensor | None = None):
        emb = self.t_mlp(timestep_embedding(t, self.ch))
        if self.pooled is not None:
            emb = emb + self.pooled(cond.mean(dim=1))
        h = self.inp(x)
        skips = []
        for block, attn, down in zip(self.down, self.attn_down, self.downsample):
            h = self._attn(attn, block(h, emb), cond)
            skips.append(h)
            h = down(h)
        h = self._attn(self.attn_mid, self.mid(h, emb), cond)
        for block, attn in zip(self.up, self.attn_up):
            skip = skips.pop()
            h = F.interpolate(h, size=skip.shape[-2:], mode="nearest")
            h = self._attn(attn, block(torch.cat([h, skip], dim=1), emb), cond)
        return self.out(h)


# ----------------------------------------------------------------------------- spatial condition
GRID_CHANNELS = 4     # (u value, u density, a value, a density) on the latent grid


def latent_centres(side: int, res: int) -> torch.Tensor:
    """(side*side, 2) coordinates in [0, 1]^2 of the latent pixels' centres, row-major like
    ``grid_coords``: latent pixel k covers nodes f k .. f k + f - 1 of the (padded) field,
    f = ceil(res / side) (the VAE's 2^down)."""
    f = -(-res // side)
    x = ((torch.arange(side, dtype=torch.float32) + 0.5) * f - 0.5) / (res - 1)
    gx, gy = torch.meshgrid(x, x, indexing="ij")
    return torch.stack([gx.ravel(), gy.ravel()], dim=1)


def lift_points(coords: torch.Tensor, values: torch.Tensor, side: int, res: int,
                sigma: float) -> torch.Tensor:
    """Point set -> latent grid ("GINO-lite" lifting with a fixed Gaussian kernel): per latent
    pixel the kernel-weighted mean of the observed values and the kernel density (how much
    evidence is near). coords (B, P, 2), values (B, P) -> (B, 2, side, side)."""
    centres = latent_centres(side, res).to(coords.device, coords.dtype)
    d2 = ((centres[None, :, None, :] - coords[:, None, :, :]) ** 2).sum(-1)    # (B, G, P)
    w = torch.exp(-d2 / (2 * sigma**2))
    density = w.sum(-1)
    mean = (w * values[:, None, :]).sum(-1) / density.clamp_min(1e-6)
    return torch.stack([mean, density], dim=1).view(len(coords), 2, side, side)


def observation_grid(coords: torch.Tensor, values: torch.Tensor, direction: torch.Tensor,
                     side: int, res: int, sigma: float) -> torch.Tensor:
    """The spatial condition (B, 4, side, side): the lifted observations in the u slots
    (direction -1, inverse: u observed) or the a slots (+1, forward: a observed), zeros in the
    other; an all-zero grid is the null (unconditional) condition."""
    lifted = lift_points(coords, values, side, res, sigma)
    fwd = (direction.view(-1, 1, 1, 1) > 0).to(lifted.dtype)
    return torch.cat([lifted * (1 - fwd), lifted * fwd], dim=1)


class DirectionConditioning:
    """The direction token: +1 forward (condition = sparse a), -1 inverse. A learned null token
    stands in for the observation tokens when the condition is dropped (training with
    ``cond_dropout``), which gives the unconditional prior of the same network. Needs
    ``direction`` (Linear(1, d_cond)) and ``null`` ((1, 1, d_cond))."""

    def condition(self, obs_tokens: torch.Tensor | None, direction: torch.Tensor,
                  drop: torch.Tensor | None = None, n_points: int = 1) -> torch.Tensor:
        """Tokens the UNet attends to. ``obs_tokens=None`` is the unconditional prior (``n_points``
        null tokens, as many as observations, so attention and pooling see what a dropped row
        saw in training); ``drop`` (B,) bool replaces the observation tokens of those rows."""
        tok = self.direction(direction.float().view(-1, 1, 1))
        if obs_tokens is None:
            return torch.cat([self.null.expand(len(direction), n_points, -1), tok], dim=1)
        if drop is not None:
            obs_tokens = torch.where(drop.view(-1, 1, 1), self.null.expand_as(obs_tokens), obs_tokens)
        return torch.cat([obs_tokens, tok], dim=1)

    @staticmethod
    def drop_grid(grid: torch.Tensor | None, drop: torch.Tensor | None) -> torch.Tensor | None:
        """Dropped rows see the null grid (zeros), as the unconditional prior does."""
        if grid is None or drop is None:
            return grid
        return torch.where(drop.view(-1, 1, 1, 1), torch.zeros_like(grid), grid)

    def with_grid(self, z: torch.Tensor, grid: torch.Tensor | None) -> torch.Tensor:
        """UNet input: the noisy latent and, with ``grid_channels``, the spatial condition
        (zeros = unconditional)."""
        if not self.grid_channels:
            return z
        if grid is None:
            grid = z.new_zeros(z.shape[0], self.grid_channels, *z.shape[-2:])
        return torch.cat([z, grid], dim=1)


class LatentDenoiser(DirectionConditioning, nn.Module):
    """The conv UNet with cross-attention to observation + direction tokens and, with
    ``grid_channels``, the lifted observations concatenated to its input (as SD's inpainting
    UNet takes the masked image's latent): the tokens alone were ignored (v1, v2)."""

    def __init__(self, latent_channels: int, ch: int, d_cond: int, levels: int = 1,
                 grid_channels: int = 0):
        super().__init__()
        self.grid_channels = grid_channels
        self.unet = UNet(latent_channels + grid_channels, ch, levels=levels, d_cond=d_cond,
                         out_ch=latent_channels)
        self.direction = nn.Linear(1, d_cond)
        self.null = nn.Parameter(torch.zeros(1, 1, d_cond))

    def forward(self, z, t, cond, grid=None):
        return self.unet(self.with_grid(z, grid), t, cond)


# ----------------------------------------------------------------------------- regressor baseline
class MaskedRegressor(nn.Module):
    """Masked-input baseline: (observed field scattered on the grid, mask) -> the other field."""

    def __init__(self, width: int = 32):
        super().__init__()
        self.net = UNet(2, width, levels=2)
        self.head = nn.Conv2d(2, 1, 1)

    def forward(self, sparse: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = torch.stack([sparse, mask.float()], dim=1)
        n = x.shape[-1]
        pad = (-n) % 4
        x = F.pad(x, (0, pad, 0, pad)) if pad else x
        t = torch.zeros(x.shape[0], dtype=torch.long, device=x.device)
        return self.head(self.net(x, t))[:, 0, :n, :n]
